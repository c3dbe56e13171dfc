#!/usr/bin/env bash
# Builds tessera and runs the whole test suite, then again under AddressSanitizer and
# UndefinedBehaviorSanitizer. This is the README's test command and what CI runs.
# Both CUDA configurations are built and tested (cmake/cuda.cmake): the first pass with TESSERA_CUDA=AUTO
# (the CUDA backend where the toolkit is found; its tests, label "gpu", skip with the reason where no
# GPU is there), the sanitizer passes CPU-only (TESSERA_CUDA=OFF: the CUDA runtime is not instrumented,
# and these passes are what test the build without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
configure=$(cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release) || { echo "$configure"; exit 1; }
grep "tessera: CUDA" <<<"$configure" || true  # the one line that says whether CUDA is built, and why not
# A clean build prints no warning (CMakeLists.txt says which two of -Wextra's are off, and why); one
# that appears fails the run here, with its lines. (ccache replays a cached compile's warnings.)
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
cmake --build build -j "$jobs" 2>&1 | tee "$build_log"
if grep -q -E "warning:|warning :" "$build_log"; then
  echo "test.sh: the build printed warnings; a clean build prints none:" >&2
  grep -E -B4 "warning:|warning :" "$build_log" >&2
  exit 1
fi
# The chaos run (label "chaos", 4-7 minutes) only when asked: TESSERA_CHAOS=1 (docs/distributed.md).
chaos=(-LE chaos)
[ "${TESSERA_CHAOS:-0}" = 1 ] && chaos=()
ctest --test-dir build --output-on-failure -j "$jobs" "${chaos[@]}"
# The parsers under libFuzzer (clang, ASan + UBSan): 12 s per target here (12 targets, 72 s on 2 cores); scripts/fuzz.sh --long for
# the real search.
bash scripts/fuzz.sh
if [ "${TESSERA_SKIP_SANITIZERS:-0}" != 1 ]; then
  # -g1: line tables only, enough for the sanitizers' file:line stacks, and quicker to build than -g.
  # One ctest test per GoogleTest suite here (TESSERA_TESTS_BY_SUITE): under ASan each process
  # costs 0.25 s to start and leak-check, and a suite's tests share one.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTESSERA_SANITIZE=ON \
    -DTESSERA_TESTS_BY_SUITE=ON -DTESSERA_CUDA=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
  # "LongTier" tests (full training runs on real data) ran above; under the sanitizers they would take
  # many minutes and check the same code paths as the short tests. So do the test-host and Slurm
  # cluster tests (MultiHost, SlurmCluster): they run one at a time (a resource lock) and took 4 of
  # this pass's minutes, for the same C++ the short multi-process tests run.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" \
    -E "LongTier|MultiHost|SlurmCluster"
  # ThreadSanitizer on the code that runs its own threads (loader, allocator, store, launcher,
  # process groups, DDP, parameter servers, pipeline stages and tensor- and sequence-parallel groups as threads,
  # the serving batcher). Worlds of 2 and 3 threads check the collectives' threading; 4 and 8 took two
  # minutes more here for nothing new (the other passes run them).
  # libgomp is not instrumented, so tests whose ops run on the OpenMP team would report false races;
  # these run with one intra-op thread.
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTESSERA_SANITIZE_THREAD=ON -DTESSERA_CUDA=OFF >/dev/null
  cmake --build build-tsan -j "$jobs" --target tessera_tests
  # The process group (worker and watchdog threads), DDP and its hooks run on the threaded backend.
  OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -E "LongTier|DdpTraining|PsTraining|MultiHost|SlurmCluster|world_4|world_8" \
    -R "ShmPointToPoint|ShmSymmetric|DynamicBatcher|DataLoader|Sampler|CpuAllocator|Trainer\.ResumedRun|HashStore|PrefixStore|TcpStore|StoreConformance|StoreFromEnv|KeyValueTable|Launch|ProcessGroup|Ddp|CommHook|SyncBatchNorm|ThreadedCollectives|TcpCollectives|TcpSubgroups|TcpAllreduce|TcpMesh|HierarchicalCollectives|AllReduceSum|Ps(ShardPlan|SyncEquals|Sparse|Bounded|Faults|Checkpoint|Protocol)|Pipeline|DeviceMesh|TensorParallel|SequenceParallel|ModelParallel(Layouts|Trainer)|DryCommunicator|JobPlan|LiveMembership|ShmFailure"
fi
