#!/usr/bin/env bash
# Distributed training against standalone, measured in one run:
#   1. one worker under `tandem launch` vs `tandem train` (target >= 0.98)
#      for resnet20 and the 4096-wide MLP;
#   2. two workers vs one worker on this machine, with the step breakdown.
# Usage: bench/distributed_training.sh [build dir] [repeats]
# Runs are interleaved (A B A B ...) and each side keeps its best, so drift
# on a shared machine hits both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc)

RESNET="--model resnet20 --dataset synthetic --synthetic-shape 3x32x32 --synthetic-size 8192 --batch-size 64 --max-steps 40"
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256 --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps 40"
COMMON="--eval-every 1000000 --log-every 1000 --progress plain --prefetch-threads 1"

run() {  # name, command...
  local name=$1; shift
  "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1 || { cat "$OUT/$name.log"; exit 1; }
}

summary() {  # run dirs...: best samples/s and that run's breakdown
  python3 - "$@" <<'PY'
import json, sys
best = max((json.load(open(d + "/summary.json")) for d in sys.argv[1:]), key=lambda s: s["samples_per_sec"])
b = best["step_breakdown"]
print(json.dumps({"samples_per_sec": best["samples_per_sec"], "step_ms": 1e3 * b["step"],
                  "breakdown_ms": {k: round(1e3 * v, 2) for k, v in b.items() if k != "step"}}))
PY
}

ratio() { python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(f'{a[\"samples_per_sec\"]/b[\"samples_per_sec\"]:.3f}')" "$1" "$2"; }

# compare LABEL MODEL A-NAME B-NAME: runs `a` and `b` (functions below)
# interleaved for MODEL and prints b/a with both sides' best summaries.
compare() {
  local label=$1 model=$2 a=$3 b=$4 args; local ra=() rb=()
  args=$([[ $model == resnet ]] && echo "$RESNET" || echo "$MLP")
  for i in $(seq "$REPEATS"); do
    "$a" "$model-$a-$i" $args; ra+=("$OUT/$model-$a-$i")
    "$b" "$model-$b-$i" $args; rb+=("$OUT/$model-$b-$i")
  done
  local sa sb; sa=$(summary "${ra[@]}"); sb=$(summary "${rb[@]}")
  echo "== $model: $label: $(ratio "$sb" "$sa")"
  echo "   $a: $sa"
  echo "   $b: $sb"
}
standalone() { local name=$1; shift; run "$name" "$TANDEM" train "$@" $COMMON --threads "$CORES"; }
launch1() { local name=$1; shift; run "$name" "$TANDEM" launch --workers 1 -- "$@" $COMMON --threads "$CORES"; }
# Two workers split the cores; the global batch doubles (per-worker batch fixed).
launch2() { local name=$1; shift; run "$name" "$TANDEM" launch --workers 2 -- "$@" $COMMON; }

echo "machine: $CORES cores; repeats: $REPEATS (best of each)"
for model in resnet MLP; do compare "1 worker under launch vs standalone" $model standalone launch1; done
for model in resnet MLP; do compare "2 workers vs 1 (aggregate samples/s)" $model launch1 launch2; done
