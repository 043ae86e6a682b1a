#!/usr/bin/env bash
# Two workers under real torchrun against `tandem launch --workers 2`, same
# flags, no --threads (each process picks its own share of the cores), as
# aggregate samples/s measured in one run. Goal: torchrun / launch >= 0.95.
# Usage: bench/launchers.sh [build dir] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
source bench/common.sh

RESNET="--model resnet20 --dataset synthetic --synthetic-shape 3x32x32 --synthetic-size 8192 --batch-size 64 --max-steps 40"
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256 --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps 30"
COMMON="--eval-every 1000000 --log-every 1000 --progress plain --prefetch-threads 1"

launch2() { local name=$1; shift; run "$name" "$TANDEM" launch --workers 2 -- "$@" $COMMON; }
# The venv's torchrun (torch 2.x: dashed flags, no --redirects/--tee needed).
torchrun2() {
  local name=$1; shift
  run "$name" .venv/bin/torchrun --nproc-per-node 2 --master-port "$(free_port)" --no-python \
    "$TANDEM" train "$@" $COMMON
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "machine: $(nproc) cores; repeats: $REPEATS (best of each)"
compare "torchrun vs tandem launch, 2 workers (aggregate samples/s)" resnet20 "$RESNET" launch2 torchrun2
compare "torchrun vs tandem launch, 2 workers (aggregate samples/s)" mlp "$MLP" launch2 torchrun2
