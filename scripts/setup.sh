#!/usr/bin/env bash
# Installs what tessera needs from Debian's packages. Usage: scripts/setup.sh [--bench]
# --bench also installs PyTorch (python3-torch), the reference that `tessera bench` runs beside us, and
# scikit-learn (python3-sklearn) for bench/sklearn_tabular.py.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
packages=(cmake ninja-build ccache g++ libopenblas-openmp-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev libpng-dev libgloo-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist fortunes
          etcd-server clang libclang-rt-14-dev iproute2 slurm-wlm munge
          libcpp-httplib-dev wrk chromium
          pybind11-dev python3-dev python3-numpy python3-pytest python3-pip python3-setuptools python3-wheel)
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
