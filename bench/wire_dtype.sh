#!/usr/bin/env bash
# --wire-dtype fp16|bf16 against float32 (issue 13, item 3), in two parts.
#
# 1. Bytes and time on a 1 Gbit/s link (tandem lab, so needs root): the
#    emulated ResNet-152 on a K80 (profiles/resnet152-k80-b32.json, 1.6 s
#    a step; 58.2M parameters with 10 synthetic classes), 2 hosts with 1
#    worker each, synchronous all-reduce (25 MB buckets) and sync PS with a
#    server on each host (4 MiB chunks, the model-sized default). float32 is
#    link-bound there: 233 MB a step each way.
# 2. Fashion-MNIST accuracy after the same epochs: the default cnn, 2 workers
#    with all-reduce, batch 32 each, same seed, in fp32, fp16, bf16 and bf16
#    with error feedback, plus sync PS in fp16 (a server rounds its values
#    for every pull).
#
# Usage: sudo bench/wire_dtype.sh [OUT]
#   STEPS=10   measured lab steps per run (after 2 warm-up steps)
#   EPOCHS=2   Fashion-MNIST epochs per run
#   PARTS="lab accuracy seeds"  (seeds: fp32 and fp16 all-reduce again at
#              seeds 2 and 3, for the run-to-run spread; "spread": every
#              format with all-reduce and sync PS at each of SEEDS, with
#              each format's mean against float32's of the same layout)
#   SEEDS="1 2 3 4 5"  for "spread"
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-wire-dtype}
STEPS=${STEPS:-10}
EPOCHS=${EPOCHS:-2}
PARTS=${PARTS:-"lab accuracy seeds"}
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

acc_run() {  # name, launch flags..., --, train flags...
  local name=$1; shift
  echo "== $name: tandem launch $*" >&2
  "$TANDEM" launch "$@" --batch-size 32 --epochs "$EPOCHS" --progress plain \
    --out "$OUT/$name" --overwrite >"$OUT/$name.log" 2>&1 || { tail -40 "$OUT/$name.log"; exit 1; }
}
last_accuracy() {  # run name
  python3 -c "import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if '\"eval\"' in l]; print(e[-1]['test_accuracy'])" \
    "$OUT/$1/metrics.jsonl"
}

if [[ " $PARTS " == *" accuracy "* ]]; then
  acc_run fmnist-fp32 --workers 2 -- --seed 1
  acc_run fmnist-fp16 --workers 2 -- --wire-dtype fp16 --seed 1
  acc_run fmnist-bf16 --workers 2 -- --wire-dtype bf16 --seed 1
  acc_run fmnist-bf16-ef --workers 2 -- --wire-dtype bf16 --error-feedback --seed 1
  acc_run fmnist-ps-fp16 --workers 2 --ps 1 -- --wire-dtype fp16 --seed 1
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

if [[ " $PARTS " == *" seeds "* ]]; then
  for seed in 2 3; do
    for wire in fp32 fp16; do
      acc_run fmnist-$wire-seed$seed --workers 2 -- --wire-dtype $wire --seed $seed
    done
  done
  for seed in 2 3; do
    a=$(last_accuracy fmnist-fp32-seed$seed); b=$(last_accuracy fmnist-fp16-seed$seed)
    echo "seed $seed: fp32 $a, fp16 $b, fp16 - fp32 $(python3 -c "print(f'{100 * ($b - $a):+.2f}')") points"
  done | tee "$OUT/seeds-table.txt"
fi

if [[ " $PARTS " == *" spread "* ]]; then
  names=()
  for seed in ${SEEDS:-1 2 3 4 5}; do
    for layout in allreduce ps; do
      for wire in fp32 fp16 bf16; do
        name=spread-$layout-$wire-seed$seed
        if [ "$layout" = ps ]; then flags=(--workers 2 --ps 1); else flags=(--workers 2); fi
        acc_run "$name" "${flags[@]}" -- --wire-dtype $wire --seed $seed
        names+=("$name")
      done
    done
  done
  python3 - "$OUT" "${names[@]}" <<'PY' | tee "$OUT/spread-table.txt"
import json, os, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
acc = {}
for name in names:
    _, layout, wire, seed = name.split("-")
    evals = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if '"eval"' in l]
    acc[(layout, wire, seed)] = evals[-1]["test_accuracy"]
seeds = sorted({k[2] for k in acc}, key=lambda s: int(s[4:]))
print(f"{'layout':<10} {'wire':<5} " + " ".join(f"{s:>8}" for s in seeds) + f" {'mean':>8} {'vs fp32':>8} {'per seed vs fp32 (points)':>30}")
for layout in ["allreduce", "ps"]:
    base = [acc[(layout, "fp32", s)] for s in seeds]
    for wire in ["fp32", "fp16", "bf16"]:
        a = [acc[(layout, wire, s)] for s in seeds]
        diffs = " ".join(f"{100 * (x - b):+.2f}" for x, b in zip(a, base))
        print(f"{layout:<10} {wire:<5} " + " ".join(f"{x:>8.4f}" for x in a) +
              f" {statistics.mean(a):>8.4f} {100 * (statistics.mean(a) - statistics.mean(base)):>+8.2f} {diffs:>30}")
PY
fi
