#!/usr/bin/env bash
# Installs what refit needs on Debian 12 (when missing), then configures and builds it in
# ./build. Run as root or as a user with sudo. Idempotent: a second run only rebuilds.
#   tools/setup.sh            # RelWithDebInfo build in ./build
#   BUILD_DIR=b CMAKE_ARGS=-DREFIT_SANITIZE=ON tools/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin check libsubunit-dev
      libyaml-dev libjansson-dev libxxhash-dev libssl-dev
      libhdf5-openmpi-dev python3-h5py  # HDF5 checkpoints; h5py: the cross-check tests
      python3-torch python3-mpi4py      # python3-*: the Python binding's test (python/tests)
      python3-matplotlib                # bench/plots.py (the bench_plots test)
      python3-pip python3-setuptools python3-wheel)  # pip install ./python (install test)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "refit setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
build=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
