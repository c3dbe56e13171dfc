#!/usr/bin/env bash
# Fuzzes tessera's parsers with clang's libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer.
#   scripts/fuzz.sh                 each target for 12 s, one per core at a time (what scripts/test.sh runs)
#   scripts/fuzz.sh --seconds N     each target for N s
#   scripts/fuzz.sh --long          each target for an hour (or until --seconds), for the real search
#   scripts/fuzz.sh --runs N        each target until it has run N inputs (no time bound unless --seconds)
#   scripts/fuzz.sh ... TARGET...   only the targets named
# Targets and seed corpora are in fuzz/; what a run finds (a crash, a leak, a timeout) stops it with
# the input saved under build-fuzz/findings/<target>/. The corpus it grows stays in build-fuzz/corpus/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=12
seconds_given=0
runs=-1
chosen=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; seconds_given=1; shift 2 ;;
    --long) seconds=3600; seconds_given=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    -*) echo "usage: scripts/fuzz.sh [--seconds N | --long] [--runs N] [TARGET...]" >&2; exit 2 ;;
    *) chosen+=("$1"); shift ;;
  esac
done
# A run count alone means no time bound (libFuzzer's 0).
if [ "$runs" -ge 0 ] && [ "$seconds_given" = 0 ]; then seconds=0; fi
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is not installed (scripts/setup.sh installs clang)" >&2; exit 1; }
targets=(heartbeat idx store_frame config stage_header safetensors etcd_reply slurm_env clip_text serve_request ps_request csv_row manifest)
if [ "${#chosen[@]}" -gt 0 ]; then
  for t in "${chosen[@]}"; do
    [[ " ${targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (targets: ${targets[*]})" >&2; exit 2; }
  done
  targets=("${chosen[@]}")
fi
CXX=clang++ CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON \
  -DTESSERA_BUILD_TESTS=OFF -DTESSERA_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
fuzz_one() {
  local t=$1
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  # The seeds are read, never written: new inputs go to build-fuzz/corpus/.
  local log="build-fuzz/findings/$t/log"
  # Inputs up to 64 KiB, except clip_text: its inputs are lines parsed one by one, each throwing on
  # most inputs, so a 64 KiB input only repeats a 4 KiB one's work; at 64 KiB its inputs grew to
  # 18 KiB and the rate fell to 1,000/s (10 million inputs: 3 hours of a core).
  local max_len=65536
  [ "$t" = clip_text ] && max_len=4096
  if ! ./build-fuzz/fuzz/fuzz_$t -max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
       -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz.sh: $t failed; the input is under build-fuzz/findings/$t/" >&2
    return 1
  fi
  echo "fuzz $t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)"
}
# One target per core at a time; every target runs even after one fails, and any failure fails the run.
parallel=$(nproc)
failed=0
pids=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$parallel" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit "$failed"
