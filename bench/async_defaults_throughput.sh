#!/usr/bin/env bash
# Issue 52's throughput goal: async with its defaults (staleness-aware
# rates and the momentum correction, worked out on the servers per push)
# against async as it was (--staleness-lr off --async-momentum-correction
# off), one build, interleaved, each side's best of REPEATS:
#   1. cnn on Fashion-MNIST, 1 PS + 4 workers (SGD, momentum 0.9);
#   2. the 4096-wide MLP, 1 PS + 2 workers (Adam: beta1 corrected).
# At lr 0.01 (cnn) and 1e-4 (MLP), where plain async does not collapse, so
# both sides run every step. Prints defaults/plain samples/s per workload.
# Usage: bench/async_defaults_throughput.sh [build dir] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
source bench/common.sh
scratch_out tandem-async-defaults
need_fashion_mnist

CNN="--model cnn --dataset fashion-mnist --batch-size 32 --max-steps ${CNN_STEPS:-1200} --optimizer sgd --lr 0.01"
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps 60"
COMMON="--ps-mode async --eval-every 1000000 --log-every 1000 --progress plain --stop-on-collapse off"

# plain / defaults NAME WORKERS ARGS...: one launch with 1 PS.
plain() { local name=$1 workers=$2; shift 2
  run "$name" "$BUILD/tandem" launch --ps 1 --workers "$workers" -- "$@" $COMMON \
    --staleness-lr off --async-momentum-correction off; }
defaults() { local name=$1 workers=$2; shift 2
  run "$name" "$BUILD/tandem" launch --ps 1 --workers "$workers" -- "$@" $COMMON; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $BUILD; best of $REPEATS"
compare "cnn, 1 PS + 4 workers, async (defaults/plain)" cnn "4 $CNN" plain defaults
compare "mlp, 1 PS + 2 workers, async, Adam (defaults/plain)" mlp "2 $MLP" plain defaults
