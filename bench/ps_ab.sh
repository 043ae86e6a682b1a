#!/usr/bin/env bash
# Two builds of Tandem on the parameter-server path, in one run: for a
# refactor that must not slow it (issue 49's "no benchmark slower").
#   1. the 4096-wide MLP (Adam), 1 PS + 1 worker, sync: large chunks;
#   2. cnn on Fashion-MNIST, 1 PS + 2 workers, sync: small chunks, many
#      requests a step (the server's per-request path);
#   3. the same, async.
# Prints NEW/OLD samples/s for each, with both sides' best breakdowns.
# Usage: bench/ps_ab.sh OLD_BUILD NEW_BUILD [repeats]
# Runs are interleaved and each side keeps its best (bench/common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/ps_ab.sh OLD_BUILD NEW_BUILD [repeats]}
NEW=${2:?usage: bench/ps_ab.sh OLD_BUILD NEW_BUILD [repeats]}
REPEATS=${3:-3}
source bench/common.sh
scratch_out tandem-ps-ab
need_fashion_mnist

MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps 30"
CNN="--model cnn --dataset fashion-mnist --batch-size 32 --max-steps ${CNN_STEPS:-300}"
COMMON="--eval-every 1000000 --log-every 1000 --progress plain"

# side NAME PS WORKERS ARGS...: one launch of that build.
old() { local name=$1 ps=$2 workers=$3; shift 3; run "$name" "$OLD/tandem" launch --ps "$ps" --workers "$workers" -- "$@" $COMMON; }
new() { local name=$1 ps=$2 workers=$3; shift 3; run "$name" "$NEW/tandem" launch --ps "$ps" --workers "$workers" -- "$@" $COMMON; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; old $OLD, new $NEW; best of $REPEATS"
compare "mlp, 1 PS + 1 worker, sync (new/old)" mlp-sync "1 1 $MLP" old new
compare "cnn, 1 PS + 2 workers, sync (new/old)" cnn-sync "1 2 $CNN" old new
compare "cnn, 1 PS + 2 workers, async (new/old)" cnn-async "1 2 $CNN --ps-mode async" old new
