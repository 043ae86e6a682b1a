#!/usr/bin/env bash
# Seed scenario 1 (issue 12): the users' async ResNet-110 cluster, emulated.
# ResNet-110, CIFAR-10 shapes, batch 128 per worker, 330 ms a step on a
# TITAN X (profiles/resnet110-titanx-b128.json); 1 Gbit/s host links; 1 to
# 4 hosts with 2 workers each. Layouts:
#   users     async PS, one server, on host 0 (what the users ran), with
#             4 MB chunks (Tandem's default until issue 13)
#   sharded   async PS, one server on each host (Tandem's PS layout),
#             0.5 MB chunks so that pushes start early in backward
#   allreduce synchronous all-reduce, 1 MB buckets; its prediction includes
#             this machine's fixed cost per bucket all-reduce among that
#             many processes (tandem bench allreduce, 4 KB)
# plus one worker alone, the reference for "N times one worker".
# Also checks time dilation: the largest users run (link-bound) again at
# dilation 4, i.e. 250 Mbit/s links and 4x the compute time.
# Needs root (tandem lab). Usage: sudo bench/lab_resnet110_async.sh [OUT] [HOSTS]
#   STEPS=20  steps per worker measured (after 3 warm-up steps)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-resnet110}
HOSTS=${2:-"1 2 3 4"}
STEPS=${STEPS:-20}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"
TRAIN="--model resnet110 --dataset synthetic --synthetic-shape 3x32x32 --synthetic-size 100000
       --emulate-compute profiles/resnet110-titanx-b128.json --batch-size 128"
per_worker=$((STEPS + 4))
names=()
lab_run one-worker --hosts 1 --workers-per-host 1 --link-mbps 1000 -- $TRAIN --max-steps $per_worker
export LABEL_one_worker="one worker"; names+=(one-worker)
for h in $HOSTS; do
  n=$((2 * h))
  lab_run users-$h --hosts "$h" --workers-per-host 2 --ps 1 --link-mbps 1000 -- \
    $TRAIN --ps-mode async --ps-chunk-mb 4 --max-steps $((n * per_worker))
  lab_run sharded-$h --hosts "$h" --workers-per-host 2 --ps "$h" --link-mbps 1000 -- \
    $TRAIN --ps-mode async --ps-chunk-mb 0.5 --max-steps $((n * per_worker))
  lab_run allreduce-$h --hosts "$h" --workers-per-host 2 --link-mbps 1000 --message-us "$(message_us "$n")" -- \
    $TRAIN --bucket-mb 1 --max-steps $per_worker
  export "LABEL_users_$h=users: 1 PS" "LABEL_sharded_$h=Tandem: PS on every host" "LABEL_allreduce_$h=Tandem: all-reduce"
  names+=(users-$h sharded-$h allreduce-$h)
done
last=${HOSTS##* }
n=$((2 * last))
lab_run dilated-$last --hosts "$last" --workers-per-host 2 --ps 1 --link-mbps 1000 --dilation 4 -- \
  $TRAIN --ps-mode async --ps-chunk-mb 4 --max-steps $((n * per_worker))
export "LABEL_dilated_$last=users: 1 PS, dilation 4"
names+=(dilated-$last)
collect "${names[@]}"
echo "results: $OUT/results.json; plot: python3 tools/plot_lab.py resnet110 $OUT/results.json docs/img/lab-resnet110-async.png"
