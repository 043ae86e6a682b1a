#!/usr/bin/env bash
# The Python package against the CLI on the same model and data shape
# (issue 11): an MLP 784-1024-1024-10, SGD momentum 0.9, batch 64 per worker,
# 150 steps, under `tandem launch` with 1 and 2 workers, with all-reduce and
# with 1 parameter server in sync mode. Python is a plain
# PyTorch loop with td.DistributedOptimizer (bench/peer/tandem_torch_bench.py);
# the CLI is `tandem train`. Both report samples/s over every step's time.
# Rounds are interleaved; each side keeps its best.
# Usage: bench/python_overhead.sh [build dir]    REPEATS=3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TANDEM=${TANDEM:-$BUILD/tandem}
REPEATS=${REPEATS:-3}
OUT=${OUT:-$(mktemp -d /tmp/tandem-python-overhead.XXXXXX)}
source bench/common.sh
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"

PS=0
cli() {  # name workers
  run "$1" "$TANDEM" launch --ps "$PS" --workers "$2" -- --model mlp --mlp-widths 1024,1024 --dataset synthetic \
    --synthetic-shape 1x28x28 --batch-size 64 --optimizer sgd --lr 0.01 --momentum 0.9 --max-steps 150 \
    --log-every 50 --eval-every 100000
}
python() {  # name workers
  run "$1" "$TANDEM" launch --ps "$PS" --workers "$2" -- .venv/bin/python bench/peer/tandem_torch_bench.py \
    --steps 150 --batch-size 64 --widths 1024,1024 --mode "$([[ $PS == 0 ]] && echo allreduce || echo ps-sync)"
}
for PS in 0 1; do
  for workers in 1 2; do
    compare "python / CLI samples/s, $PS PS, $workers worker(s)" "ps$PS-w$workers" "$workers" cli python
  done
done
echo "runs in $OUT"
