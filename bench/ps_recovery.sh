#!/usr/bin/env bash
# Parameter-server faults, measured in one run on this host (1 PS, 2-3
# workers, a 4096-wide MLP so that a step is real work):
#   1. a killed PS under launch --max-restarts 1 (sync): wall time against an
#      uninterrupted run, the steps redone from the checkpoint, the seconds
#      from the kill to the job training again (bit-identity of the result
#      is a test: LaunchRestart in tests/cli_restart_test.cpp);
#   2. the same kill without a launcher: every task started by hand with
#      --restart-wait, the server started again by hand at once; the same
#      figures (bit-identity: RestartInPlace in
#      tests/cli_restart_in_place_test.cpp);
#   3. consistent async checkpoints: the job's rate with a snapshot every
#      K steps against none (every other worker pauses while the chief
#      fetches the state).
# Usage: bench/ps_recovery.sh [build dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-200}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-recovery-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
MLP="--model mlp --mlp-widths 1024,1024 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 64
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 64 --threads 1
     --eval-every 1000000 --log-every 10"

# report LABEL SECONDS RUN_DIR CHIEF_LOG LINE_PREFIX: the restart record and
# the time from the kill ($killed_at) to the chief's last "training" line.
report() {
  python3 - "$clean_s" "$killed_at" "$@" <<'PY'
import json, re, sys, datetime
clean_s, killed_at, label, seconds, run, log, prefix = sys.argv[1:]
clean_s, killed_at, seconds = float(clean_s), float(killed_at), float(seconds)
record = json.loads(open(f"{run}/restarts.jsonl").readline())
stamps = re.findall(re.escape(prefix) + r"\[(\d\d:\d\d:\d\d\.\d+)\] \[info\] training ", open(log).read())
day = datetime.datetime.fromtimestamp(killed_at).date()
back = datetime.datetime.combine(day, datetime.time.fromisoformat(stamps[-1])).timestamp()
print(f"   uninterrupted: {clean_s:.1f} s; {label}: {seconds:.1f} s ({seconds / clean_s:.2f}x)")
print(f"   resumed from step {record['resume_step']}; last step reported {record['last_reported_step']}; "
      f"steps redone {record['lost_updates']}")
print(f"   kill -> the restarted chief training again: {back - killed_at:.2f} s")
PY
}

echo "== 1. killed PS, sync, 1 PS + 2 workers, $STEPS steps, checkpoint every $((STEPS / 4))"
start=$(date +%s.%N)
"$TANDEM" launch --ps 1 --workers 2 -- $MLP --max-steps "$STEPS" --checkpoint-every $((STEPS / 4)) --out "$OUT/clean" >"$OUT/clean.log" 2>&1
clean_s=$(python3 -c "import time; print(time.time() - $start)")
start=$(date +%s.%N)
"$TANDEM" launch --ps 1 --workers 2 --max-restarts 1 -- $MLP --max-steps "$STEPS" --checkpoint-every $((STEPS / 4)) --out "$OUT/killed" \
  >"$OUT/killed.log" 2>&1 &
launch_pid=$!
# Kill ps 0 halfway between the second and third checkpoints.
while ! grep -qs "step-$((STEPS / 2))" "$OUT/killed/checkpoints/latest"; do sleep 0.05; done
sleep 0.5
killed_at=$(date +%s.%N)
pkill -KILL -f -- "--out $OUT/killed .*--job-name ps --task-index 0( |\$)"
wait "$launch_pid"
killed_s=$(python3 -c "import time; print(time.time() - $start)")
report "killed and restarted" "$killed_s" "$OUT/killed" "$OUT/killed.log" "[worker 0] "

echo "== 2. killed PS, sync, by hand: every task with --restart-wait 60, the server started again at once"
ports=($(python3 -c "
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in socks))"))
HAND="$MLP --max-steps $STEPS --checkpoint-every $((STEPS / 4)) --out $OUT/hand --restart-wait 60 --progress plain
      --worker-hosts 127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} --ps-hosts 127.0.0.1:${ports[2]}"
start=$(date +%s.%N)
"$TANDEM" train $HAND --job-name ps --task-index 0 >"$OUT/hand-ps.log" 2>&1 &
ps_pid=$!
pids=()
for i in 0 1; do
  "$TANDEM" train $HAND --job-name worker --task-index $i >"$OUT/hand-worker$i.log" 2>&1 &
  pids+=($!)
done
while ! grep -qs "step-$((STEPS / 2))" "$OUT/hand/checkpoints/latest"; do sleep 0.05; done
sleep 0.5
killed_at=$(date +%s.%N)
kill -KILL "$ps_pid"
{ wait "$ps_pid"; } 2>/dev/null || true
"$TANDEM" train $HAND --job-name ps --task-index 0 >"$OUT/hand-ps-again.log" 2>&1 &
pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
hand_s=$(python3 -c "import time; print(time.time() - $start)")
report "killed and started again by hand" "$hand_s" "$OUT/hand" "$OUT/hand-worker0.log" ""

echo "== 3. async snapshots, 1 PS + 3 workers, $((STEPS * 3)) job steps"
for every in 0 $((STEPS / 4)); do
  for i in 1 2; do
    "$TANDEM" launch --ps 1 --workers 3 -- $MLP --ps-mode async --max-steps $((STEPS * 3)) \
      --checkpoint-every "$every" --keep-checkpoints 0 --out "$OUT/async-$every-$i" >"$OUT/async-$every-$i.log" 2>&1
  done
  python3 - "$OUT" "$every" <<'PY'
import glob, json, sys
out, every = sys.argv[1], sys.argv[2]
best = max(json.load(open(f"{out}/async-{every}-{i}/summary.json"))["samples_per_sec"] for i in (1, 2))
n = len(glob.glob(f"{out}/async-{every}-1/checkpoints/step-*.ckpt"))
print(f"   checkpoint every {every if every != '0' else 'never'}: {best:.0f} samples/s (best of 2), {n} snapshot(s)")
PY
done
