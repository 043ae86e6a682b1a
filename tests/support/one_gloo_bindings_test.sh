#!/usr/bin/env bash
# One Gloo, seen by the dynamic linker: two `tandem` worker processes sum
# buffers (bench allreduce) under LD_DEBUG=files,bindings; no process loads
# Debian's libgloo, and every binding of a
# Gloo symbol, from any object, must land in LibTorch (libtorch_cpu.so, or
# libtorch_cuda.so, which carries Gloo's CUDA side from the same source).
set -euo pipefail
BUILD_DIR=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LD_DEBUG=files,bindings LD_DEBUG_OUTPUT="$WORK/ld" "$BUILD_DIR/tandem" bench allreduce --workers 2 --sizes 4K,1M \
  > "$WORK/out.txt" 2>&1 || { cat "$WORK/out.txt"; exit 1; }
# "binding file A [0] to B [0]: normal symbol `_ZN4gloo...'"
grep -h "symbol \`_Z[A-Za-z0-9_]*4gloo" "$WORK"/ld.* > "$WORK/gloo.txt" || true
total=$(wc -l < "$WORK/gloo.txt")
elsewhere=$(grep -Ev " to [^ ]*/libtorch_(cpu|cuda)\.so " "$WORK/gloo.txt" || true)
if (( total == 0 )); then
  echo "FAIL: no Gloo symbol was bound at all: is LD_DEBUG honoured, or the collectives not Gloo's?"
  exit 1
fi
if [[ -n "$elsewhere" ]]; then
  echo "FAIL: Gloo symbols bound outside LibTorch:"
  echo "$elsewhere" | head -20
  exit 1
fi
if grep -qh "file=[^ ]*libgloo" "$WORK"/ld.*; then
  echo "FAIL: a process loaded Debian's libgloo"
  exit 1
fi
echo "ok: $total Gloo bindings, all into LibTorch ($(grep -c 'libtorch_cpu' "$WORK/gloo.txt") to libtorch_cpu.so)"
