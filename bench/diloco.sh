#!/usr/bin/env bash
# Issue 33's DiLoCo goal: Fashion-MNIST `cnn`, 1 PS + WORKERS workers (8),
# EPOCHS epochs (1) of batch 32 a worker, per seed: sync (every step's
# gradients through the server; SGD lr 0.05 momentum 0.9, the defaults)
# and DiLoCo with H local steps for H in MODES (h10 h50 h200; aN: async
# DiLoCo; sN: streaming DiLoCo, FRAGMENTS (4) fragments each merged
# DELAY (1) steps after its exchange starts, at MIX (0.5)). DiLoCo's workers run INNER (default: sync's SGD), then the
# server runs the outer optimizer with OUTER's flags (default: none, the
# paper's Nesterov lr 0.7 momentum 0.9). MODES may also name async, dc
# and dcc (async with DC-ASGD, adaptive or constant) at sync's rate (the
# modes are bench/common.sh's mode_flags); a run that diverges
# counts as chance (0.10). Every mode sees the same samples. Bytes are the
# server's own count of what crossed its connections (bytes_in +
# bytes_out: pushes, pulls and the start).
# Prints one row per run, then per mode the mean and spread of test
# accuracy and its bytes against sync's; writes nothing else.
# RESULTS=FILE also writes every run's accuracy and bytes there as JSON,
# for tools/plot_diloco.py.
# TASK=resnet20 trains resnet20 on learnable synthetic data instead
# (SYNTHETIC: --synthetic-shape 3x16x16 --synthetic-classes 400
# --synthetic-size 51200, a class template plus as much noise; the test
# split has its own noise and labels), batch BATCH (16): 400 steps a
# worker per epoch.
# Usage: bench/diloco.sh [build dir] [seeds, e.g. "1 2 3 4 5"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SEEDS=${2:-"1 2 3 4 5"}
MODES=${MODES:-"sync h10 h50 h200"}
WORKERS=${WORKERS:-8}
EPOCHS=${EPOCHS:-1}
TANDEM="$BUILD/tandem"
source bench/common.sh
scratch_out tandem-diloco
need_fashion_mnist
ARGS="--dataset fashion-mnist --model cnn --batch-size 32 --epochs $EPOCHS --threads 1 --progress plain --log-every 500"
if [[ ${TASK:-cnn} == resnet20 ]]; then
  SYNTHETIC=${SYNTHETIC:-"--synthetic-shape 3x16x16 --synthetic-classes 400 --synthetic-size 51200"}
  ARGS="--dataset synthetic $SYNTHETIC --model resnet20 --batch-size ${BATCH:-16} --epochs $EPOCHS --threads 1
        --progress plain --log-every 500"
fi
SYNC="--optimizer sgd --lr 0.05 --momentum 0.9"
INNER=${INNER:-$SYNC}
OUTER=${OUTER:-}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $WORKERS workers; $ARGS;" \
  "DiLoCo inner: $INNER; outer: ${OUTER:-defaults}"
for seed in $SEEDS; do
  for mode in $MODES; do
    extra=$(mode_flags "$mode")
    # shellcheck disable=SC2086  # the flags split on purpose
    if ! "$TANDEM" launch --ps 1 --workers "$WORKERS" -- $ARGS --seed "$seed" $extra --out "$OUT/$mode-$seed" \
      > "$OUT/$mode-$seed.log" 2>&1; then
      grep -q "loss became" "$OUT/$mode-$seed.log" || { tail -5 "$OUT/$mode-$seed.log"; exit 1; }
      # A run whose loss went non-finite stops, naming the step: chance accuracy, the bytes it sent.
      echo '{"test_accuracy": 0.1, "diverged": true, "wall_seconds": 0}' > "$OUT/$mode-$seed/summary.json"
    fi
    python3 -c "import json, os; s = json.load(open('$OUT/$mode-$seed/summary.json')); \
f = '$OUT/$mode-$seed/ps/ps-0/summary.json'; p = json.load(open(f)) if os.path.exists(f) else None; \
mb = f'{(p[\"bytes_in\"] + p[\"bytes_out\"]) / 1e6:.1f} MB' if p else 'diverged'; \
print(f'$mode seed $seed: test accuracy {s[\"test_accuracy\"]:.4f}, {mb}, {s[\"wall_seconds\"]:.1f} s')"
  done
done
python3 - "$OUT" "$SEEDS" "$MODES" "${RESULTS:-}" "$INNER" "${OUTER:-}" <<'PY'
import json, os, statistics, sys
out, seeds, modes, results = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
def server_bytes(mode, seed):  # None for a run that diverged before the server's summary
    path = f"{out}/{mode}-{seed}/ps/ps-0/summary.json"
    if not os.path.exists(path):
        return None
    p = json.load(open(path))
    return p["bytes_in"] + p["bytes_out"]
def mean_bytes(mode):
    known = [b for b in (server_bytes(mode, s) for s in seeds) if b is not None]
    return statistics.mean(known) if known else float("nan")
base = mean_bytes(modes[0])
for mode in modes:
    acc = [json.load(open(f"{out}/{mode}-{s}/summary.json"))["test_accuracy"] for s in seeds]
    mb = mean_bytes(mode)
    spread = statistics.pstdev(acc) if len(acc) > 1 else 0.0
    print(f"{mode}: accuracy mean {statistics.mean(acc):.4f}, spread (std) {spread:.4f}, min {min(acc):.4f}, "
          f"max {max(acc):.4f}; {mb / 1e6:.1f} MB on the wire, {base / mb:.1f}x fewer than {modes[0]}")
if results:
    rows = [{"mode": m, "seed": int(s), "bytes": server_bytes(m, s) or mean_bytes(m),
             "test_accuracy": json.load(open(f"{out}/{m}-{s}/summary.json"))["test_accuracy"]}
            for m in modes for s in seeds]
    json.dump({"inner": sys.argv[5], "outer": sys.argv[6], "runs": rows}, open(results, "w"), indent=1)
PY
