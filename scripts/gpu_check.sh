#!/usr/bin/env bash
# The GPU check in one command, on a GPU machine (H100/H200) that has nvcc, the CUDA libraries, CMake,
# ninja and PyTorch but none of our Debian packages. scripts/gpu_bundle.sh made gpu-bundle/ on a CPU
# machine; this unpacks it, says which CUDA libraries it found and where, prints nvidia-smi and the
# versions loaded, runs every test labelled "gpu" (plainly, then under compute-sanitizer where the
# toolkit has it) and the GPU benchmarks, and writes each log to OUTDIR. Each step has a timeout; together
# they stay under the device tool's 10 minutes for one command, and in practice take about 5 on an H100,
# so that a 15-minute window leaves room to run it again after a fix.
#   scripts/gpu_check.sh OUTDIR            exit 0 only if every step passed
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/gpu_check.sh OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
root=$PWD
out=$(mkdir -p "$1" && cd "$1" && pwd)
bundle=$root/gpu-bundle/tessera-gpu.tar.xz
[ -f "$bundle" ] || { echo "gpu_check: no $bundle: run scripts/gpu_bundle.sh on the build machine first" >&2; exit 2; }
start=$(date +%s)
failed=()
say() { echo "gpu_check [$(($(date +%s) - start)) s]: $*" | tee -a "$out/summary.txt"; }
# step NAME TIMEOUT CMD...: runs CMD into OUTDIR/NAME.log under a timeout; a failure is remembered.
step() {
  local name=$1 limit=$2
  shift 2
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local status=$?
  if [ $status -eq 0 ]; then say "$name: ok"; else say "$name: FAILED (exit $status; $out/$name.log)"; failed+=("$name"); fi
  return $status
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! tar -C "$work" -xJf "$bundle" 2>/dev/null; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$bundle" "$work"
fi
say "unpacked $(sed -n 1p "$work/manifest")"
cp "$work/manifest" "$out/manifest"

# The CUDA libraries the binaries were linked against, from this machine: its toolkit first, then
# PyTorch's nvidia-* packages. Each is printed with where it was found.
dirs=()
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib" /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && dirs+=("$d")
done
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
for base in "$site/nvidia" "$(dirname "$torch_dir" 2>/dev/null)/nvidia" "$torch_dir/lib"; do
  [ -d "$base" ] && while read -r d; do dirs+=("$d"); done < <(find "$base" -name 'lib*.so*' -printf '%h\n' | sort -u)
done
libpath=$work/lib
for lib in $(sed -n 's/^cuda_libraries=//p' "$work/manifest"); do
  found=""
  for d in "${dirs[@]}"; do
    if [ -e "$d/$lib" ]; then found=$d; break; fi
  done
  if [ -n "$found" ]; then
    say "found $lib in $found"
    [[ ":$libpath:" == *":$found:"* ]] || libpath=$libpath:$found
  else
    say "MISSING $lib (looked in ${dirs[*]})"
  fi
done
# Our libstdc++ only where this machine's is older than the binaries need.
need=$(sed -n 's/^glibcxx_needed=//p' "$work/manifest")
system_stdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
if [ -n "$need" ] && ! grep -qa "$need" "$system_stdcxx" 2>/dev/null; then
  libpath=$libpath:$work/lib-fallback
  say "this machine's libstdc++ ($system_stdcxx) lacks $need: using the bundle's"
fi
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$out/summary.txt"

{ nvidia-smi; echo; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; } >"$out/nvidia-smi.log" 2>&1
say "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1), $(ldd --version | head -1)"
step devices 60 "$work/bin/tessera" devices && cat "$out/devices.log" | tee -a "$out/summary.txt"

filter=$(cat "$work/gpu_tests.filter")
if ! grep -q '^cuda:0 ' "$out/devices.log"; then
  say "no CUDA device visible to tessera: the GPU tests would only skip"
  failed+=(no-device)
fi
step gpu-tests 200 "$work/bin/tessera_tests" --gtest_filter="$filter" --gtest_output="xml:$out/gpu-tests.xml"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/gpu-tests.log" | tee -a "$out/summary.txt"
# On a GPU machine a skipped GPU test is a failure: it means the device or a library was not usable.
if grep -q '^\[  SKIPPED \]' "$out/gpu-tests.log"; then
  say "gpu-tests: some skipped ($(grep -m1 -A0 'no CUDA device' "$out/gpu-tests.log"))"
  failed+=(gpu-tests-skipped)
fi
# The GPU benchmarks, each beside PyTorch on the same device.
step bench-matmul 120 "$work/bin/tessera" bench matmul --device cuda:0 --python "$(command -v python3)" \
  --script "$root/bench/torch_matmul.py" && tail -n 12 "$out/bench-matmul.log" | tee -a "$out/summary.txt"
# One training step of the MLP, CNN and GPT on the GPU beside PyTorch eager and torch.compile.
step bench-train-step 180 "$work/bin/tessera" bench train-step --device cuda:0 --models mlp,cnn,gpt --repeats 3 \
  --mlp-steps 100 --cnn-steps 50 --gpt-steps 30 --no-python --python "$(command -v python3)" \
  --torch-script "$root/bench/torch_train_step.py" && tail -n 8 "$out/bench-train-step.log" | tee -a "$out/summary.txt"
# GPT-2 124M's shape in bf16, with its model FLOP utilisation.
step bench-gpt2 150 "$work/bin/tessera" bench train-step --device cuda:0 --models gpt2 --precision bf16 --repeats 3 \
  --gpt-steps 10 --no-python --python "$(command -v python3)" --torch-script "$root/bench/torch_train_step.py" &&
  tail -n 4 "$out/bench-gpt2.log" | tee -a "$out/summary.txt"

# Last, as the least urgent: where the device tool stops the command at its 10 minutes, every log
# above has come back already.
sanitizer=$(command -v compute-sanitizer || true)
for candidate in "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" "${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer/compute-sanitizer"; do
  [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
done
if [ -n "$sanitizer" ]; then
  # The kernels' tests only: the training runs would take many minutes under memcheck.
  step compute-sanitizer 150 "$sanitizer" --tool memcheck --error-exitcode 1 --leak-check full \
    "$work/bin/tessera_tests" --gtest_filter="$filter:-CudaTraining.*:CudaDdpTraining.*"
  tail -n 3 "$out/compute-sanitizer.log" | tee -a "$out/summary.txt"
  # Shared-memory races in the kernels that reduce in blocks (rows, norms, losses, indexing).
  step compute-sanitizer-racecheck 90 "$sanitizer" --tool racecheck --error-exitcode 1 \
    "$work/bin/tessera_tests" --gtest_filter="CudaKernels.*:CudaPool.*"
  tail -n 3 "$out/compute-sanitizer-racecheck.log" | tee -a "$out/summary.txt"
else
  say "compute-sanitizer: not on this machine"
fi

say "done in $(($(date +%s) - start)) s; ${#failed[@]} step(s) failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
