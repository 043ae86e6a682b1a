#!/usr/bin/env bash
# A killed all-reduce worker, measured in one run on this host: the cnn on
# Fashion-MNIST, 4 workers, kill -9 of worker 2 at 5/8 of the steps:
#   1. uninterrupted: wall time and test accuracy;
#   2. live membership (--min-workers 3): the three others go on. Seconds
#      from the kill to the survivors training again (the chief's
#      restarts.jsonl record, written once the new ring is up and the step
#      is about to be done again), wall time against (1), steps lost,
#      accuracy;
#   3. live membership with the launcher restarting the dead task
#      (--min-workers 3, launch --max-restarts 1): the new worker 2 joins
#      the running job with a peer's state. Seconds from the kill to 4
#      workers training again, wall time, accuracy;
#   4. the usual answer, a gang restart (launch --max-restarts 1, a
#      checkpoint every STEPS/4): every task stopped and started again from
#      the newest checkpoint; seconds from the kill to the restarted chief
#      training again, wall time, steps redone;
#   5. the usual answer in PyTorch: DDP over gloo under torchrun
#      --max-restarts 1, the same model, data, batch and rate
#      (bench/peer/torch_restart.py, a checkpoint every STEPS/4): seconds
#      from the kill to the restarted group training again.
# Usage: bench/live_recovery.sh [build dir] [steps] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-400}
SEED=${3:-1}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-live-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
source bench/common.sh
JOB="--model cnn --dataset fashion-mnist --batch-size 32 --threads 1 --lr 0.05 --max-steps $STEPS --seed $SEED
     --log-every 10 --eval-every 0"
# Between two of the gang restart's checkpoints, as a death usually falls.
KILL_AT=$((STEPS * 5 / 8))

# start NAME LAUNCH_ARGS TRAIN_ARGS: launches in the background; sets launch_pid and started.
start() {
  started=$(date +%s.%N)
  "$TANDEM" launch --workers 4 $2 -- $JOB $3 --out "$OUT/$1" >"$OUT/$1.log" 2>&1 &
  launch_pid=$!
}
kill_worker() { kill_worker_after "$OUT/$1" "$KILL_AT" 2; }

echo "== cnn, Fashion-MNIST, 4 workers, $STEPS steps, seed $SEED, worker 2 killed after step $KILL_AT ($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
start clean "" ""
wait "$launch_pid"
clean_s=$(seconds_since "$started")

start live "" "--min-workers 3"
kill_worker live
live_killed_at=$killed_at
wait "$launch_pid"
live_s=$(seconds_since "$started")

start rejoin "--max-restarts 1" "--min-workers 3"
kill_worker rejoin
rejoin_killed_at=$killed_at
wait "$launch_pid"
rejoin_s=$(seconds_since "$started")

start gang "--max-restarts 1" "--checkpoint-every $((STEPS / 4))"
kill_worker gang
wait "$launch_pid"
gang_s=$(seconds_since "$started")

TORCHRUN=${TORCHRUN:-.venv/bin/torchrun}
mkdir -p "$OUT/torch"
started=$(date +%s.%N)
# The c10d rendezvous, as torchrun's docs advise for restarts: with a static
# --master-port a restarted group could read the failed group's addresses.
"$TORCHRUN" --nproc-per-node 4 --max-restarts 1 --rdzv-backend c10d --rdzv-id "live-bench-$SEED" \
  --rdzv-endpoint "127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  bench/peer/torch_restart.py --steps "$STEPS" --seed "$SEED" --checkpoint-every $((STEPS / 4)) --out "$OUT/torch" \
  >"$OUT/torch.log" 2>&1 &
launch_pid=$!
while ! grep -qs "^step $KILL_AT at" "$OUT/torch.log"; do sleep 0.02; done
torch_killed_at=$(date +%s.%N)
for pid in $(pgrep -f bench/peer/torch_restart.py); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx LOCAL_RANK=2; then kill -KILL "$pid"; fi
done
wait "$launch_pid"
torch_s=$(seconds_since "$started")

python3 - "$OUT" "$live_killed_at" "$killed_at" "$clean_s" "$live_s" "$gang_s" "$rejoin_killed_at" "$rejoin_s" "$torch_killed_at" "$torch_s" <<'PY'
import datetime, json, re, sys
out, live_killed_at, killed_at, clean_s, live_s, gang_s, rejoin_killed_at, rejoin_s, torch_killed_at, torch_s = \
    sys.argv[1], *map(float, sys.argv[2:])
def summary(name): return json.load(open(f"{out}/{name}/summary.json"))
def records(name): return [json.loads(l) for l in open(f"{out}/{name}/restarts.jsonl")]
clean, live, gang = summary("clean"), summary("live"), summary("gang")
print(f"   uninterrupted: {clean_s:.1f} s, test accuracy {clean['test_accuracy']:.4f}")
change = records("live")[0]
print(f"   live (--min-workers 3): {live_s:.1f} s ({live_s / clean_s:.2f}x), test accuracy {live['test_accuracy']:.4f}, "
      f"{change['workers_before']} -> {change['workers_after']} workers at step {change['step']}, "
      f"lost updates {change['lost_updates']}, rolled back {change['rolled_back']}, "
      f"kill -> training again {change['time'] - live_killed_at:.2f} s")
rejoin = summary("rejoin")
back = [r for r in records("rejoin") if r.get("kind") == "membership" and r["workers_after"] == 4][-1]
print(f"   live + rejoin (--min-workers 3, --max-restarts 1): {rejoin_s:.1f} s ({rejoin_s / clean_s:.2f}x), "
      f"test accuracy {rejoin['test_accuracy']:.4f}, {rejoin['workers']} workers at the end, worker 2 back at step "
      f"{back['step']}, lost updates {back['lost_updates']}, kill -> 4 workers training again "
      f"{back['time'] - rejoin_killed_at:.2f} s")
restart = records("gang")[0]
stamps = re.findall(r"\[worker 0\] \[(\d\d:\d\d:\d\d\.\d+)\] \[info\] training ", open(f"{out}/gang.log").read())
day = datetime.datetime.fromtimestamp(killed_at).date()
back = datetime.datetime.combine(day, datetime.time.fromisoformat(stamps[-1])).timestamp()
print(f"   gang restart (--max-restarts 1): {gang_s:.1f} s ({gang_s / clean_s:.2f}x), test accuracy "
      f"{gang['test_accuracy']:.4f}, resumed from step {restart['resume_step']}, steps redone {restart['lost_updates']}, "
      f"kill -> training again {back - killed_at:.2f} s")
torch_log = open(f"{out}/torch.log").read()
again = re.search(r"^training again at ([0-9.]+) from step (\d+)", torch_log, re.M)
torch_back = float(again.group(1)) - torch_killed_at
live_back = change['time'] - live_killed_at
print(f"   torchrun DDP (--max-restarts 1): {torch_s:.1f} s, resumed from step {again.group(2)}, "
      f"kill -> training again {torch_back:.2f} s; live membership {torch_back / live_back:.1f}x faster")
PY
