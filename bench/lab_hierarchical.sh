#!/usr/bin/env bash
# Hierarchical aggregation against the flat layout (issue 13, item 1), 2 or
# 4 emulated hosts with 2 or 4 workers each, each host's link 100 Mbit/s.
# MODE=ps (default): sync PS with a server on every host. MODE=allreduce:
# all-reduce in BUCKET_MB buckets (default 0: sized from the model, about
# 16). The GPU is a small one: resnet20 (1.08 MB of parameters) at
# 10 + 20 ms a step for batch 64 (profiles/test-gpu-resnet20.json), so the
# links bind. Both layouts run the same job; the table gives each host
# link's bytes per step, aggregate samples/s and the ratio to the
# comm-bound optimum of that layout.
# Needs root (tandem lab). Usage: sudo bench/lab_hierarchical.sh [OUT]
#   STEPS=20  steps per worker (after 3 warm-up steps); DILATION=2
#   HOSTS="2 4", WORKERS="2 4": the grid (e.g. HOSTS=8 WORKERS=2 DILATION=8)
#   REPEATS=1: runs per layout, the two layouts alternating; with more than
#   one, the table ends with each layout's median, min and max of optimum
#   MODEL, PROFILE, BATCH, LINK_MBPS: another job, e.g. Gloo's ring (buckets
#   from 4 MiB), where hierarchy saves bytes: MODE=allreduce MODEL=resnet110
#   PROFILE=profiles/resnet110-titanx-b128.json BATCH=128 LINK_MBPS=1000 BUCKET_MB=25
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${MODE:-ps}
OUT=${1:-runs/bench-lab-hierarchical$([ "$MODE" = ps ] || echo "-$MODE")}
STEPS=${STEPS:-20}
DILATION=${DILATION:-2}
BUCKET_MB=${BUCKET_MB:-0}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"
MODEL=${MODEL:-resnet20}
PROFILE=${PROFILE:-profiles/test-gpu-resnet20.json}
BATCH=${BATCH:-64}
LINK_MBPS=${LINK_MBPS:-100}
TRAIN="--model $MODEL --dataset synthetic --synthetic-shape 3x32x32 --emulate-compute $PROFILE
       --batch-size $BATCH --max-steps $((STEPS + 3)) --seed 3"
REPEATS=${REPEATS:-1}
names=()
for h in ${HOSTS:-2 4}; do
  for w in ${WORKERS:-2 4}; do
    for r in $(seq 1 "$REPEATS"); do
      for mode in auto off; do
        if [ "$MODE" = ps ]; then layout=(--ps "$h"); extra=(); else layout=(); extra=(--bucket-mb "$BUCKET_MB"); fi
        name=h$h-w$w-$mode$([ "$REPEATS" = 1 ] || echo "-r$r")
        lab_run "$name" --hosts $h --workers-per-host $w "${layout[@]}" --link-mbps "$LINK_MBPS" --dilation "$DILATION" -- \
          $TRAIN --hierarchical $mode "${extra[@]}"
        export "LABEL_${name//-/_}=$h hosts x $w, $mode"
        names+=("$name")
      done
    done
  done
done
collect "${names[@]}" | tee "$OUT/table.txt"
