#!/usr/bin/env bash
# Installs every Debian package Tandem needs and selects the OpenMP
# OpenBLAS. Idempotent: a second run only checks.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-openmp libopenblas-dev
  libgloo-dev libzmq3-dev cppzmq-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  python3-torch openmpi-bin
  pybind11-dev python3-dev
  libgoogle-perftools-dev
  libprotobuf-dev protobuf-compiler
  libjpeg62-turbo-dev libpng-dev
  iproute2 python3-matplotlib
  clang libclang-rt-14-dev
)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

# Torch runs its own OpenMP thread pool; a pthreads OpenBLAS beside it
# oversubscribes the cores (threads spinning in sched_yield, about 2x slower
# steps measured with bench/train_overhead). Point every BLAS alternative at
# the OpenMP flavour, which shares torch's pool.
select_openblas_openmp() {
  local alt target current
  for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu \
             libopenblas.so.0-x86_64-linux-gnu libblas.so-x86_64-linux-gnu \
             liblapack.so-x86_64-linux-gnu libopenblas.so-x86_64-linux-gnu; do
    target=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-openmp | head -n1 || true)
    [[ -n "$target" ]] || continue
    current=$(update-alternatives --query "$alt" | sed -n 's/^Value: //p')
    if [[ "$current" != "$target" ]]; then
      $SUDO update-alternatives --set "$alt" "$target" >/dev/null
      echo "setup: $alt -> $target"
    fi
  done
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
select_openblas_openmp
echo "setup: ${#PACKAGES[@]} packages present, OpenMP OpenBLAS selected"
