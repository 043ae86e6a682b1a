#!/usr/bin/env bash
# Installs every Debian package Tandem needs. Idempotent: a second run
# only checks that the packages are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-openmp libopenblas-dev
  libgloo-dev libzmq3-dev cppzmq-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

# Debian's default BLAS alternative may be the slow reference one; prefer
# OpenBLAS (OpenMP flavour) when it is installed.
for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
  target=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-openmp | head -n1 || true)
  if [[ -n "$target" ]]; then $SUDO update-alternatives --set "$alt" "$target" >/dev/null; fi
done
echo "setup: done"
