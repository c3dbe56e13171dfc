#!/usr/bin/env bash
# Builds tessera with CUDA (code for sm_90: the H100 and H200) on this CPU machine and packs what a
# bare GPU machine needs to run the GPU tests and benchmarks into gpu-bundle/ (ignored by git), for
# scripts/gpu_check.sh to unpack there. Usage: scripts/gpu_bundle.sh [BUILD_DIR]   (default build-gpu)
#
# The GPU machine has nvcc, the CUDA libraries (its toolkit's and PyTorch's nvidia-* packages), CMake,
# ninja and PyTorch, but no package registry and none of our Debian libraries. So the bundle carries
# the test binary and the CLI (stripped) with every shared library they load that is neither glibc's
# nor CUDA's: OpenBLAS, oneDNN, Gloo, Open MPI, libgomp, libstdc++ and the rest. The CUDA libraries are
# not carried (cuDNN and NCCL alone are hundreds of MB): they are linked dynamically and gpu_check.sh
# finds the GPU machine's own. It must stay under 48 MiB, so that the device tool carries it with room.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=gpu-bundle
limit_mib=48

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTESSERA_PYTHON=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target tessera tessera_tests

# The tests the "gpu" label holds, as a GoogleTest filter: ctest's label is the one list of them (a
# parameterised test's name there ends in "  # GetParam() = ...", which the filter leaves out).
gpu_tests=$(ctest --test-dir "$build" -L gpu -N | sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p' | paste -sd:)
[ -n "$gpu_tests" ] || { echo "gpu_bundle: ctest lists no test labelled gpu in $build" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/tessera" "$build/tests/tessera_tests" "$stage/bin/"
strip --strip-unneeded "$stage/bin/"*

# Libraries the GPU machine has of its own: glibc's (it cannot be carried: the loader must match it)
# and the CUDA ones, its driver's included.
system_or_cuda='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libcuda|libnvidia|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc)\.so'
cuda_needed=()
while read -r name path; do
  if [[ "$name" =~ $system_or_cuda ]]; then
    [[ "$name" =~ ^lib(cublas|cublasLt|cudnn|nccl) ]] && cuda_needed+=("$name")
    continue
  fi
  # libstdc++ and libgcc_s go apart: gpu_check.sh uses them only where the machine's own are older.
  case "$name" in
    libstdc++.so*|libgcc_s.so*) mkdir -p "$stage/lib-fallback"; cp -L "$path" "$stage/lib-fallback/$name" ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done < <(ldd "$build/tessera" "$build/tests/tessera_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
strip --strip-unneeded "$stage"/lib*/* 2>/dev/null || true
# Open MPI's components are plugins it opens at run time; the bench and GPU tests never start MPI, so
# they are left out (the mpi backend fails with Open MPI's own message there).

{
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) commit=$(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)"
  echo "nvcc=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') arch=sm_90"
  echo "cuda_libraries=$(printf '%s\n' "${cuda_needed[@]}" | sort -u | paste -sd' ')"
  echo "glibc_needed=$(objdump -T "$stage"/bin/* | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  echo "glibcxx_needed=$(objdump -T "$stage"/bin/* "$stage"/lib/* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
} > "$stage/manifest"
printf '%s\n' "$gpu_tests" > "$stage/gpu_tests.filter"

rm -rf "$out"
mkdir -p "$out"
tar -C "$stage" -cf - . | xz -9 -T0 > "$out/tessera-gpu.tar.xz"
cp "$stage/manifest" "$out/manifest"
size=$(stat -c %s "$out/tessera-gpu.tar.xz")
echo "gpu_bundle: $out/tessera-gpu.tar.xz $((size / 1024)) KiB ($(ls "$stage/lib" | wc -l) libraries carried; needs from the GPU machine: ${cuda_needed[*]:-none})"
cat "$out/manifest"
echo "gpu_bundle: $(echo "$gpu_tests" | tr ':' '\n' | wc -l) tests labelled gpu"
if [ "$size" -gt $((limit_mib * 1024 * 1024)) ]; then
  echo "gpu_bundle: over the ${limit_mib} MiB limit" >&2
  exit 1
fi
