#!/usr/bin/env bash
# --wire-dtype fp16|bf16 against float32 (issue 13, item 3), in two parts.
#
# 1. Bytes and time on a 1 Gbit/s link (tandem lab, so needs root): the
#    emulated ResNet-152 on a K80 (profiles/resnet152-k80-b32.json, 60.2M
#    parameters, 1.6 s a step), 2 hosts with 1 worker each, synchronous
#    all-reduce (25 MB buckets) and sync PS with a server on each host
#    (4 MB chunks). float32 is link-bound there: 241 MB a step each way.
# 2. Fashion-MNIST accuracy after the same epochs: the default cnn, 2 workers
#    with all-reduce, batch 32 each, same seed, in fp32, fp16, bf16 and bf16
#    with error feedback, plus sync PS in fp16 (a server rounds its values
#    for every pull).
#
# Usage: sudo bench/wire_dtype.sh [OUT]
#   STEPS=10   measured lab steps per run (after 2 warm-up steps)
#   EPOCHS=3   Fashion-MNIST epochs per run
#   PARTS="lab accuracy"
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-wire-dtype}
STEPS=${STEPS:-10}
EPOCHS=${EPOCHS:-3}
PARTS=${PARTS:-"lab accuracy"}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"

if [[ " $PARTS " == *" lab "* ]]; then
  TRAIN="--model resnet152 --dataset synthetic --synthetic-shape 3x224x224 --synthetic-size 256
         --emulate-compute profiles/resnet152-k80-b32.json --batch-size 32 --max-steps $((STEPS + 2))"
  names=()
  for wire in fp32 fp16 bf16; do
    lab_run allreduce-$wire --hosts 2 --workers-per-host 1 --link-mbps 1000 --warmup-steps 2 -- \
      $TRAIN --wire-dtype $wire
    lab_run ps-$wire --hosts 2 --workers-per-host 1 --ps 2 --link-mbps 1000 --warmup-steps 2 -- \
      $TRAIN --wire-dtype $wire
    export "LABEL_allreduce_$wire=all-reduce, $wire" "LABEL_ps_$wire=sync PS on every host, $wire"
    names+=(allreduce-$wire ps-$wire)
  done
  collect "${names[@]}" | tee "$OUT/lab-table.txt"
fi

if [[ " $PARTS " == *" accuracy "* ]]; then
  acc_run() {  # name, launch flags..., --, train flags...
    local name=$1; shift
    echo "== $name: tandem launch $*" >&2
    "$TANDEM" launch "$@" --batch-size 32 --epochs "$EPOCHS" --seed 1 --progress plain \
      --out "$OUT/$name" --overwrite >"$OUT/$name.log" 2>&1 || { tail -40 "$OUT/$name.log"; exit 1; }
  }
  acc_run fmnist-fp32 --workers 2 --
  acc_run fmnist-fp16 --workers 2 -- --wire-dtype fp16
  acc_run fmnist-bf16 --workers 2 -- --wire-dtype bf16
  acc_run fmnist-bf16-ef --workers 2 -- --wire-dtype bf16 --error-feedback
  acc_run fmnist-ps-fp16 --workers 2 --ps 1 -- --wire-dtype fp16
  python3 - "$OUT" <<'PY' | tee "$OUT/accuracy-table.txt"
import json, os, sys
out = sys.argv[1]
rows = []
for name in ["fmnist-fp32", "fmnist-fp16", "fmnist-bf16", "fmnist-bf16-ef", "fmnist-ps-fp16"]:
    evals = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if '"eval"' in l]
    rows.append((name, evals[-1]["test_accuracy"], evals[-1]["step"]))
base = rows[0][1]
print(f"{'run':<16} {'test accuracy':>13} {'vs fp32 (points)':>17} {'steps':>6}")
for name, acc, step in rows:
    print(f"{name:<16} {acc:>13.4f} {100 * (acc - base):>+17.2f} {step:>6}")
PY
fi
