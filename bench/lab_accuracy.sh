#!/usr/bin/env bash
# Issue 33's accuracy against wall-clock time: real Fashion-MNIST `cnn`
# training (not emulated compute) on 8 emulated hosts, one worker and one
# PS on each, links of LINKS Mbit/s each way (100 and 1000), per seed, for
# the modes of bench/diloco.sh: sync and async at sync's rate (SGD lr 0.05
# momentum 0.9), async with DC-ASGD (dc: adaptive, lambda0 2; dcc: the
# constant form, lambda0 DCC_LAMBDA), async made stable (slrm:
# --staleness-lr on, momentum 0.6), DiLoCo with H local steps (hN, AdamW
# lr 0.002 inside; outer Nesterov lr 1.0 momentum 0.5), streaming DiLoCo
# (sN: 4 fragments, delay 1, mix 0.5). One epoch of batch 32 a worker.
# The model's chunks are cut small (--ps-chunk-mb 0.025, 16 of them) so
# every server holds some.
# Wall time is the chief's time in training steps (its summary's
# train_seconds: every step's wall time, the last exchange included; the
# start-up and the final evaluation excluded); bytes are
# every server's bytes_in + bytes_out. All 16 tasks share this machine's
# cores, so compute is this machine's, slowed by the sharing: the figures
# compare modes and link speeds on it, not GPUs.
# Writes OUT/results.json (one row per run) for tools/plot_lab_accuracy.py
# and prints one row per run and per mode and link the mean and spread.
# Needs root (tandem lab). Usage: sudo bench/lab_accuracy.sh [OUT] [seeds]
#   MODES="sync async dc h10 h50 h200 s50"  LINKS="100 1000"
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-accuracy}
SEEDS=${2:-"1 2 3 4 5"}
MODES=${MODES:-"sync async dc h10 h50 h200 s50"}
LINKS=${LINKS:-"100 1000"}
DCC_LAMBDA=${DCC_LAMBDA:-0.04}
TANDEM=${TANDEM:-build/tandem}
source bench/common.sh
need_fashion_mnist
mkdir -p "$OUT"
ARGS="--dataset fashion-mnist --model cnn --batch-size 32 --epochs 1 --threads 1 --ps-chunk-mb 0.025"
SYNC="--optimizer sgd --lr 0.05 --momentum 0.9"
INNER="--optimizer adamw --lr 0.002"
OUTER="--outer-lr 1.0 --outer-momentum 0.5"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 8 hosts x (1 worker + 1 PS); links: $LINKS Mbit/s"
for link in $LINKS; do
  for seed in $SEEDS; do
    for mode in $MODES; do
      extra=$(mode_flags "$mode")
      run="$OUT/$mode-$link-$seed"
      # shellcheck disable=SC2086  # the flags split on purpose
      if ! "$TANDEM" lab --hosts 8 --ps 8 --link-mbps "$link" --warmup-steps 3 -- \
        $ARGS --seed "$seed" $extra --out "$run" --overwrite > "$run.log" 2>&1; then
        grep -q "loss became" "$run.log" || { tail -20 "$run.log"; exit 1; }
        # A run whose loss went non-finite stops, naming the step: chance accuracy, no time to accuracy.
        mkdir -p "$run" && echo '{"test_accuracy": 0.1, "diverged": true}' > "$run/summary.json"
      fi
      python3 - "$run" "$mode" "$link" "$seed" <<'PY'
import glob, json, sys
run, mode, link, seed = sys.argv[1:]
s = json.load(open(f"{run}/summary.json"))
servers = [json.load(open(p)) for p in glob.glob(f"{run}/ps/ps-*/summary.json")]
row = {"mode": mode, "link_mbit_per_s": float(link), "seed": int(seed), "test_accuracy": s["test_accuracy"],
       "diverged": bool(s.get("diverged")), "wall_seconds": s.get("train_seconds"),
       "bytes": sum(p["bytes_in"] + p["bytes_out"] for p in servers) if servers else None}
json.dump(row, open(f"{run}/row.json", "w"))
wall = f"{row['wall_seconds']:.1f} s" if row["wall_seconds"] else "diverged"
mb = f"{row['bytes'] / 1e6:.1f} MB" if row["bytes"] else "-"
print(f"{mode} {link} Mbit/s seed {seed}: test accuracy {row['test_accuracy']:.4f}, {wall}, {mb}", flush=True)
PY
    done
  done
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/*/row.json"))]
json.dump({"runs": rows}, open(f"{out}/results.json", "w"), indent=1)
groups = {}
for r in rows:
    groups.setdefault((r["link_mbit_per_s"], r["mode"]), []).append(r)
for (link, mode), rs in sorted(groups.items()):
    acc = [r["test_accuracy"] for r in rs]
    walls = [r["wall_seconds"] for r in rs if r["wall_seconds"]]
    wall = f"wall {statistics.mean(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f})" if walls else "diverged"
    print(f"{link:g} Mbit/s {mode}: accuracy mean {statistics.mean(acc):.4f}, spread (std) "
          f"{statistics.pstdev(acc):.4f}, min {min(acc):.4f}, max {max(acc):.4f}; {wall}; {len(rs)} seeds")
PY
