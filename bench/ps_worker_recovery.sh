#!/usr/bin/env bash
# A killed sync parameter-server worker, measured in one run on this host:
# the cnn on Fashion-MNIST, 1 PS + 4 workers, sync, kill -9 at 5/8 of the
# steps, under launch --max-restarts 1 (the dead worker is started again
# alone and joins at a step boundary; nobody rolls back):
#   1. uninterrupted: wall time and test accuracy;
#   2. worker 2 killed: wall time against (1), accuracy, seconds from the
#      kill to the others training again (the replacement's "joined" line,
#      printed once its join report let the step end);
#   3. worker 0, the chief, killed: the same, and the returned chief's
#      summary.
# Usage: bench/ps_worker_recovery.sh [build dir] [steps] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-400}
SEED=${3:-1}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-ps-worker-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
source bench/common.sh
JOB="--model cnn --dataset fashion-mnist --batch-size 32 --threads 1 --lr 0.05 --max-steps $STEPS --seed $SEED
     --log-every 10 --eval-every 0"
KILL_AT=$((STEPS * 5 / 8))

# start NAME: launches in the background; sets launch_pid and started.
start() {
  started=$(date +%s.%N)
  "$TANDEM" launch --ps 1 --workers 4 --max-restarts 1 -- $JOB --out "$OUT/$1" >"$OUT/$1.log" 2>&1 &
  launch_pid=$!
}
kill_worker() { kill_worker_after "$OUT/$1" "$KILL_AT" "$2"; }

echo "== cnn, Fashion-MNIST, 1 PS + 4 workers (sync), $STEPS steps, seed $SEED, a worker killed after step $KILL_AT ($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
start clean
wait "$launch_pid"
clean_s=$(seconds_since "$started")

start worker
kill_worker worker 2
worker_killed_at=$killed_at
wait "$launch_pid"
worker_s=$(seconds_since "$started")

start chief
kill_worker chief 0
chief_killed_at=$killed_at
wait "$launch_pid"
chief_s=$(seconds_since "$started")

python3 - "$OUT" "$clean_s" "$worker_killed_at" "$worker_s" "$chief_killed_at" "$chief_s" <<'PY'
import datetime, json, re, sys
out = sys.argv[1]
clean_s, worker_killed_at, worker_s, chief_killed_at, chief_s = map(float, sys.argv[2:])
def summary(name): return json.load(open(f"{out}/{name}/summary.json"))
def records(name): return [json.loads(l) for l in open(f"{out}/{name}/restarts.jsonl")]
def server(name): return json.load(open(f"{out}/{name}/ps/ps-0/summary.json"))
def joined(name, index, killed_at):
    # The replacement's line, printed once the others were let go on with it.
    line = re.search(rf"\[worker {index}\] \[(\d\d:\d\d:\d\d\.\d+)\] \[warning\] worker {index}: joined a running sync job "
                     r"in place of a lost worker \d+: it trains from step (\d+)", open(f"{out}/{name}.log").read())
    day = datetime.datetime.fromtimestamp(killed_at).date()
    at = datetime.datetime.combine(day, datetime.time.fromisoformat(line.group(1))).timestamp()
    return at - killed_at, int(line.group(2))
clean = summary("clean")
print(f"   uninterrupted: {clean_s:.1f} s, test accuracy {clean['test_accuracy']:.4f}")
for name, index, killed_at, wall in (("worker", 2, worker_killed_at, worker_s), ("chief", 0, chief_killed_at, chief_s)):
    s, ps0, record = summary(name), server(name), records(name)[0]
    back, step = joined(name, index, killed_at)
    print(f"   worker {index} killed: {wall:.1f} s ({wall / clean_s:.2f}x), test accuracy {s['test_accuracy']:.4f}, "
          f"joined to train from step {step}, kill -> training again {back:.2f} s, "
          f"lost updates {record['lost_updates']}, rolled back {record['rolled_back']}, "
          f"model updates {ps0['model_updates']} of {ps0['global_step']} steps"
          + (f", chief_returned {s.get('chief_returned', False)}" if index == 0 else ""))
PY
