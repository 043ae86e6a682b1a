#!/usr/bin/env bash
# A stream of deaths in one live all-reduce job: the cnn on Fashion-MNIST,
# WORKERS workers under `tandem launch --max-restarts N` with --min-workers
# WORKERS/2; every PERIOD seconds for DURATION seconds a random worker
# (worker 0 too: the launcher serves the store) is killed with SIGKILL, and
# the launcher starts it again into the running job. Reports whether the
# job finished, each kill against the records in OUT/restarts.jsonl, the
# updates lost, the workers at the end, and the time from each kill to the
# job training again with every worker.
# Usage: bench/live_chaos.sh [build dir] [workers] [steps] [period s] [duration s] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORKERS=${2:-8}
STEPS=${3:-3000}
PERIOD=${4:-15}
DURATION=${5:-180}
SEED=${6:-1}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-chaos-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
KILLS=$((DURATION / PERIOD))

echo "== cnn, Fashion-MNIST, $WORKERS workers, $STEPS steps, a worker killed every ${PERIOD}s for ${DURATION}s" \
  "($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
started=$(date +%s.%N)
"$TANDEM" launch --workers "$WORKERS" --max-restarts "$KILLS" -- --model cnn --dataset fashion-mnist \
  --batch-size 32 --threads 1 --lr 0.05 --max-steps "$STEPS" --seed "$SEED" --log-every 10 --eval-every 0 \
  --min-workers $((WORKERS / 2)) --verify-replicas-every 50 --out "$OUT/run" >"$OUT/log" 2>&1 &
launch_pid=$!
while ! [ -s "$OUT/run/metrics.jsonl" ]; do sleep 0.1; done
RANDOM=$SEED
: >"$OUT/kills"
for ((k = 0; k < KILLS; k++)); do
  sleep "$PERIOD"
  kill -0 "$launch_pid" 2>/dev/null || break
  victim=$((RANDOM % WORKERS))
  echo "$victim $(date +%s.%N)" >>"$OUT/kills"
  pkill -KILL -f -- "--out $OUT/run .*--job-name worker --task-index $victim( |\$)" || true
done
code=0
wait "$launch_pid" || code=$?
wall=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")

python3 - "$OUT" "$code" "$wall" "$WORKERS" <<'PY'
import json, sys
out, code, wall, workers = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
kills = [(int(w), float(t)) for w, t in (l.split() for l in open(f"{out}/kills"))]
records = [json.loads(l) for l in open(f"{out}/run/restarts.jsonl")]
summary = json.load(open(f"{out}/run/summary.json")) if code == 0 else {}
restarts = [r for r in records if r.get("replaced")]
changes = [r for r in records if r.get("kind") == "membership"]
print(f"   killed, in order: {' '.join(f'worker {w}' for w, _ in kills)}")
print(f"   launch exit {code} after {wall} s; {len(kills)} kills, {len(restarts)} restarts by launch, "
      f"{len(changes)} membership changes, lost updates {sum(r['lost_updates'] for r in changes)}, "
      f"rolled back {any(r['rolled_back'] for r in changes)}")
if summary:
    print(f"   at the end: {summary['workers']} workers, step {summary['steps']} of {summary['planned_steps']}, "
          f"test accuracy {summary['test_accuracy']:.4f}, membership changes {summary['membership_changes']}")
missing = []
backs = []
for worker, at in kills:
    # launch's record of the death, and the new process taken in with everyone
    seen = [r for r in restarts if r["time"] >= at and r["replaced"] == f"worker {worker}"]
    full = [r for r in changes if r["time"] > at and worker in r["joined"] and r["workers_after"] == workers]
    if not seen:
        missing.append(worker)
    if full:
        backs.append(full[0]["time"] - at)
print(f"   every kill recorded: {not missing}{'' if not missing else f' (missing: {missing})'}; "
      f"kill -> all {workers} training again: " +
      (f"{min(backs):.2f}-{max(backs):.2f} s over {len(backs)} kills" if backs else "never"))
PY
