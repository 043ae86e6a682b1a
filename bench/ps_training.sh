#!/usr/bin/env bash
# Parameter-server training on the 4096-wide MLP (256-4096-4096-256, Adam,
# batch 128 per worker), measured in one run:
#   standalone | 1 PS + 1 worker (sync) | 1 PS + 4 workers (async) | 2 PS + 4 workers (async)
# as aggregate updates/s (every worker's own steps over its own training time)
# with worker 0's step breakdown and the servers' apply time; then the
# server's optimizer kernels per core next to memcpy (`tandem bench ps-apply`).
# Usage: bench/ps_training.sh [build dir] [steps per worker]
# (async counts the job's steps, so its runs get workers x that many)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-30}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-ps-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc)
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128
     --eval-every 1000000 --log-every 1000 --progress plain"

run() {  # name, job steps, command...
  local name=$1 steps=$2; shift 2
  "$@" $MLP --max-steps "$steps" --out "$OUT/$name" >"$OUT/$name.log" 2>&1 || { cat "$OUT/$name.log"; exit 1; }
}

report() {  # name, label
  python3 - "$OUT/$1" "$2" <<'PY'
import glob, json, os, sys
run, label = sys.argv[1], sys.argv[2]
chief = json.load(open(run + "/summary.json"))
workers = [chief] + [json.load(open(p)) for p in sorted(glob.glob(run + "/workers/*/summary.json"))]
rate = sum(w["worker_steps"] / w["train_seconds"] for w in workers)
b = chief["step_breakdown"]
line = {"updates_per_s": round(rate, 3), "step_ms": round(1e3 * b["step"], 1),
        "breakdown_ms": {k: round(1e3 * v, 1) for k, v in b.items() if k != "step"}}
servers = [json.load(open(p)) for p in sorted(glob.glob(run + "/ps/*/summary.json"))]
if servers:
    line["servers"] = [{"model_updates": s["model_updates"], "apply_s": round(s["apply_seconds"], 2),
                        "apply_gb_per_s": round(s["apply_gb_per_s"], 2), "max_staleness": s["max_staleness"]}
                       for s in servers]
json.dump({"label": label, **line}, open(run + ".json", "w"))
print(f"{label:28s} {json.dumps(line)}")
PY
}

echo "machine: $CORES cores; $STEPS steps per worker"
run standalone "$STEPS" "$TANDEM" train --threads "$CORES"; report standalone "standalone"
run ps1w1 "$STEPS" "$TANDEM" launch --ps 1 --workers 1 --; report ps1w1 "1 PS + 1 worker, sync"
run ps1w4 $((4 * STEPS)) "$TANDEM" launch --ps 1 --workers 4 -- --ps-mode async; report ps1w4 "1 PS + 4 workers, async"
run ps2w4 $((4 * STEPS)) "$TANDEM" launch --ps 2 --workers 4 -- --ps-mode async; report ps2w4 "2 PS + 4 workers, async"
python3 - "$OUT" <<'PY'
import json, sys
rows = {n: json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ["standalone", "ps1w1", "ps1w4", "ps2w4"]}
base = rows["standalone"]["updates_per_s"]
print("updates/s relative to standalone: " +
      ", ".join(f"{r['label']}: {r['updates_per_s'] / base:.3f}" for r in rows.values()))
PY
"$TANDEM" bench ps-apply --mb 64 --seconds 2
