#!/usr/bin/env bash
# Prepares .gpu/ for bench/gpu/check.sh on a lent GPU machine, whose image
# has torch 2.11.0+cu130 but none of Tandem's Debian libraries and no apt.
# Builds `tandem` and the GPU tests here against the LibTorch of PyPI's
# torch 2.11.0 (the image's version: the binaries then run on the image's
# own libtorch), and copies beside them the shared libraries they need that
# are not LibTorch's or the C library's, plus Fashion-MNIST.
#
#   bash bench/gpu/pack.sh     # about 12 min the first time on 2 cores
# Env: TORCH_VERSION (2.11.0), BUILD (/tmp/tandem-gpu-build), TORCH_SITE.
set -euo pipefail
cd "$(dirname "$0")/../.."
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
BUILD=${BUILD:-/tmp/tandem-gpu-build}
TORCH_SITE=${TORCH_SITE:-/tmp/torch-$TORCH_VERSION}
OUT=.gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude

if [[ ! -f $TORCH_SITE/torch/lib/libtorch_cpu.so ]]; then
  mkdir -p "$TORCH_SITE"
  echo "pack: fetching torch $TORCH_VERSION's wheel (headers and libraries only are kept)"
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 "torch==$TORCH_VERSION" -d "$TORCH_SITE"
  (cd "$TORCH_SITE" && unzip -q -o torch-"$TORCH_VERSION"-*.whl 'torch/include/*' 'torch/lib/*' && rm -f torch-*.whl)
fi
if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_TORCH_DIR="$TORCH_SITE/torch" \
    -DTANDEM_BUILD_BENCH=OFF -DPython3_EXECUTABLE="$PWD/.venv/bin/python"
fi
cmake --build "$BUILD" -j 2 --target tandem tandem_gpu_tests

rm -rf "$OUT" && mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/data"
for b in tandem tests/tandem_gpu_tests; do
  objcopy --strip-debug "$BUILD/$b" "$OUT/bin/$(basename "$b")"
done
# Every library the binaries resolve here, less LibTorch's (the image has
# its own) and the C runtime's (the image's is newer).
ldd "$OUT/bin/tandem" "$OUT/bin/tandem_gpu_tests" | awk '/=> \//{print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in
      # LibTorch and the CUDA libraries its own RUNPATH finds in the image
      # (on LD_LIBRARY_PATH, a carried copy would win over them), and glibc.
      libtorch*|libc10*|libgomp*|libcudart*|libcupti*|libnvrtc*|libnccl*|libcublas*|libcudnn*) ;;
      libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*|libresolv*|libutil*) ;;
      *) cp -L "$path" "$OUT/lib/$name" ;;
    esac
  done
cp /usr/share/datasets/fashion-mnist/*.gz "$OUT/data/"
du -sh "$OUT" "$OUT"/*
