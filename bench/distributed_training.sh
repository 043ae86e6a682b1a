#!/usr/bin/env bash
# Distributed training against standalone, measured in one run:
#   1. one worker under `tandem launch` vs `tandem train` (target >= 0.98)
#      for resnet20 and the 4096-wide MLP;
#   2. two workers vs one worker on this machine, with the step breakdown.
# Usage: bench/distributed_training.sh [build dir] [repeats]
# Runs are interleaved and each side keeps its best (bench/common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc)

RESNET="--model resnet20 --dataset synthetic --synthetic-shape 3x32x32 --synthetic-size 8192 --batch-size 64 --max-steps 40"
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256 --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps 40"
COMMON="--eval-every 1000000 --log-every 1000 --progress plain --prefetch-threads 1"

source bench/common.sh
model_args() { [[ $1 == resnet ]] && echo "$RESNET" || echo "$MLP"; }

standalone() { local name=$1; shift; run "$name" "$TANDEM" train "$@" $COMMON --threads "$CORES"; }
launch1() { local name=$1; shift; run "$name" "$TANDEM" launch --workers 1 -- "$@" $COMMON --threads "$CORES"; }
# Two workers split the cores; the global batch doubles (per-worker batch fixed).
launch2() { local name=$1; shift; run "$name" "$TANDEM" launch --workers 2 -- "$@" $COMMON; }

echo "machine: $CORES cores; repeats: $REPEATS (best of each)"
for model in resnet MLP; do
  compare "1 worker under launch vs standalone" $model "$(model_args $model)" standalone launch1
done
for model in resnet MLP; do
  compare "2 workers vs 1 (aggregate samples/s)" $model "$(model_args $model)" launch1 launch2
done
