#!/usr/bin/env bash
# Issue 33's async case at the sync learning rate: Fashion-MNIST `cnn`,
# 1 PS + 4 workers, one epoch of batch 32, SGD lr 0.05 momentum 0.9 (the
# sync defaults), per seed: sync, plain async, async with DC-ASGD
# (--delay-compensation, LAMBDA0: 2, the paper's for the adaptive form;
# dcc: the constant form at DCC_LAMBDA, the paper's 0.04 by default),
# async with staleness-aware rates (--staleness-lr on, slr), the same with
# momentum SLRM_MOMENTUM (0.6) in place of 0.9 (slrm: async's stale
# updates add momentum of their own), and both (MODES picks some; the
# modes are bench/common.sh's mode_flags). Prints one row per run and the
# mean and spread per mode (a run that collapsed, and so stopped, counts
# as chance, 0.10); writes nothing else.
# WORKERS (4), MODEL (cnn), BATCH (32) and SYNC (sync's optimizer flags)
# change the workload; the other issues' figures used the defaults.
# Usage: bench/delay_compensation.sh [build dir] [seeds, e.g. "1 2 3 4 5"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SEEDS=${2:-"1 2 3 4 5"}
export LAMBDA0=${LAMBDA0:-2} DCC_LAMBDA=${DCC_LAMBDA:-0.04}
MODES=${MODES:-"sync async dc slr both"}
TANDEM="$BUILD/tandem"
source bench/common.sh
scratch_out tandem-dc
need_fashion_mnist
WORKERS=${WORKERS:-4}
ARGS="--dataset fashion-mnist --model ${MODEL:-cnn} --batch-size ${BATCH:-32} --epochs 1 --progress plain --log-every 500"
# Async adds momentum of its own (stale updates): slrm lowers the explicit one.
export SLRM_MOMENTUM=${SLRM_MOMENTUM:-0.6}
SYNC=${SYNC:-"--optimizer sgd --lr 0.05 --momentum 0.9"}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 1 PS + $WORKERS workers; $ARGS $SYNC;" \
  "lambda0 $LAMBDA0 (adaptive), $DCC_LAMBDA (constant)"
# What ps 0 applied, where it corrected the momentum: "  momentum 0.9 acted as 0.605 at mean staleness 2.95 (p99 7)".
applied_momentum() {
  python3 - "$1/ps/ps-0/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
m, p = s.get("momentum_correction"), s.get("push_staleness")
if m and p:
    print(f"  {m['setting']} {m['given']} acted as {m['applied']:.3f} at mean staleness {m['mean_staleness']:.2f} (p99 {p['p99']})")
PY
}
for seed in $SEEDS; do
  for mode in $MODES; do
    extra=$(mode_flags "$mode")
    # shellcheck disable=SC2086  # the flags split on purpose
    if "$TANDEM" launch --ps 1 --workers "$WORKERS" -- $ARGS --seed "$seed" $extra --out "$OUT/$mode-$seed" \
      > "$OUT/$mode-$seed.log" 2>&1; then
      python3 -c "import json; s = json.load(open('$OUT/$mode-$seed/summary.json')); \
print(f'$mode seed $seed: test accuracy {s[\"test_accuracy\"]:.4f}, {s[\"samples_per_sec\"]:.0f} samples/s')"
      applied_momentum "$OUT/$mode-$seed"
    elif grep -q "training collapsed" "$OUT/$mode-$seed.log"; then
      # A collapsed run stops (--stop-on-collapse), naming the step: chance accuracy.
      echo "$mode seed $seed: collapsed ($(grep -o 'the loss [^.]*' "$OUT/$mode-$seed.log" | head -1))"
      mkdir -p "$OUT/$mode-$seed" && echo '{"test_accuracy": 0.1, "diverged": true}' > "$OUT/$mode-$seed/summary.json"
    else
      tail -5 "$OUT/$mode-$seed.log"; exit 1
    fi
  done
done
python3 - "$OUT" "$SEEDS" "$MODES" <<'PY'
import json, statistics, sys
out, seeds, modes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
for mode in modes:
    acc = [json.load(open(f"{out}/{mode}-{s}/summary.json"))["test_accuracy"] for s in seeds]
    spread = statistics.pstdev(acc) if len(acc) > 1 else 0.0
    stable = sum(a > 0.5 for a in acc)
    print(f"{mode}: mean {statistics.mean(acc):.4f}, spread (std) {spread:.4f}, min {min(acc):.4f}, "
          f"stable (> 0.5) {stable}/{len(acc)}")
PY
