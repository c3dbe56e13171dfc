#!/usr/bin/env bash
# Installs what tessera needs from Debian's packages, and Ray from PyPI into .venv-ray (below).
# Usage: scripts/setup.sh [--bench]
# --bench also installs the references that `tessera bench` runs beside us: the newest PyTorch 2 that
# PyPI serves, into the virtual environment .venv (ignored by git; the benches use it when it is there,
# bench/bench.h reference_python), Debian's PyTorch 1.13 (python3-torch: the older tables of
# docs/benchmarks.md were measured against it, --python /usr/bin/python3 reproduces them) and
# scikit-learn (python3-sklearn) for bench/sklearn_tabular.py.
# The CUDA toolkit (nvcc, cuBLASLt, cuDNN, NCCL) is not installed here: CMake builds the CUDA backend
# where it finds one (TESSERA_CUDA=AUTO, cmake/cuda.cmake) and the CPU-only build elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
packages=(cmake ninja-build ccache g++ libopenblas-openmp-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev libpng-dev libgloo-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist fortunes
          etcd-server clang libclang-rt-14-dev iproute2 slurm-wlm munge elfutils
          libcpp-httplib-dev wrk chromium
          pybind11-dev python3-dev python3-numpy python3-pytest python3-pip python3-setuptools python3-wheel python3-venv)
[ "${1:-}" = "--bench" ] && packages+=(python3-torch python3-sklearn)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Ray and Ray Tune (tessera.ray, `tessera tune --backend ray` and their tests) in .venv-ray, beside this Python's packages (--system-site-packages:
# NumPy and pytest from Debian, the tessera module built for this interpreter). Pinned: the version
# docs/benchmarks.md measured. Reinstalled only when the venv cannot import it.
ray_version=2.60.0
if ! .venv-ray/bin/python3 -c "import ray, ray.tune, sys; sys.exit(ray.__version__ != '$ray_version')" 2>/dev/null; then
  echo "setup: installing Ray $ray_version (with Tune) from PyPI into .venv-ray"
  /usr/bin/python3 -m venv --system-site-packages .venv-ray
  # Debian's NumPy stays the one imported (the tessera module and the tests use it): Tune's pandas and
  # pyarrow would otherwise bring NumPy 2 into the venv, and pyarrow 18 and later need it.
  numpy_version=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')
  # Without PyPI the rest still installs and builds: the Ray tests then skip, saying why.
  if ! .venv-ray/bin/pip install --quiet "ray[tune]==$ray_version" "numpy==$numpy_version" "pyarrow<18"; then
    echo "setup: WARNING: Ray could not be installed from PyPI; tessera.ray's tests will skip" >&2
    rm -rf .venv-ray
  fi
fi
if [ "${1:-}" = "--bench" ]; then
  # PyPI's torch brings its CUDA libraries (nvidia-* wheels, about 5 GB); on a CPU machine they are
  # loaded but unused. Reinstalled only when the venv cannot import torch.
  if ! .venv/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "setup: installing PyTorch 2 from PyPI into .venv"
    /usr/bin/python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip torch numpy
  fi
  # Ray Train, Tune and Serve beside it: `tessera bench ray` runs Ray Train's TorchTrainer (PyTorch DDP)
  # and tessera.ray in the same venv.
  if ! .venv/bin/python3 -c "import ray, ray.train.torch, sys; sys.exit(ray.__version__ != '$ray_version')" 2>/dev/null; then
    echo "setup: installing Ray $ray_version (train, tune, serve) from PyPI into .venv"
    .venv/bin/pip install --quiet "ray[train,tune,serve]==$ray_version"
  fi
  echo "setup: reference pytorch $(.venv/bin/python3 -c 'import torch; print(torch.__version__)'), ray $ray_version in .venv"
fi
