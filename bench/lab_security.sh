#!/usr/bin/env bash
# What the job secret costs (docs/security.md): the same PS job across
# emulated hosts, with CURVE on every TCP port (the default) and with
# --insecure, measured back to back.
#   resnet110: 6.9 MB of parameters on an emulated TITAN X, 1 Gbit/s links
#   mlp:       the 35M-parameter MLP of bench/ps_training.sh (140 MB per push
#              and per pull), real compute, 10 Gbit/s links: the crypto's
#              worst case, bytes far beyond what the compute hides
# 2 hosts, 1 worker and 1 server on each. Needs root (tandem lab).
# Usage: sudo bench/lab_security.sh [OUT]   (STEPS=10 per worker)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-security}
STEPS=${STEPS:-10}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"
RESNET="--model resnet110 --dataset synthetic --synthetic-shape 3x32x32 --batch-size 128
        --emulate-compute profiles/resnet110-titanx-b128.json --max-steps $((STEPS + 3)) --seed 3"
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps $((STEPS + 3)) --seed 3"
names=()
for job in resnet110 mlp; do
  if [ "$job" = resnet110 ]; then train=$RESNET; mbps=1000; else train=$MLP; mbps=10000; fi
  for security in secure insecure; do
    flag=(); [ "$security" = insecure ] && flag=(--insecure)
    lab_run "$job-$security" --hosts 2 --workers-per-host 1 --ps 2 --link-mbps "$mbps" -- $train "${flag[@]}"
    export "LABEL_${job}_$security=$job, $security"
    names+=("$job-$security")
  done
done
collect "${names[@]}" | tee "$OUT/table.txt"
python3 - "$OUT" <<'PY'
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1] + "/results.json"))}
for job in ["resnet110", "mlp"]:
    s, i = rows[f"{job}-secure"], rows[f"{job}-insecure"]
    print(f"{job}: secure/insecure samples/s = {s['measured_samples_per_sec'] / i['measured_samples_per_sec']:.3f} "
          f"({s['measured_samples_per_sec']:.1f} / {i['measured_samples_per_sec']:.1f})")
PY
