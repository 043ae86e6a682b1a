#!/usr/bin/env bash
# --ps-replicas 2, measured in one run on this host (issue 50's goals):
#   1. the cost: cnn on Fashion-MNIST, sync, 2 PS + 4 and 2 PS + 2 workers,
#      with replicas against without (interleaved, each side's best): every
#      push then goes to two servers and each server applies twice the chunks;
#   2. a killed server: 2 PS + 2 workers, kill -9 of ps 0 (which keeps the
#      step clocks too) halfway: the seconds from the kill to the chief's
#      next train record, the updates lost, the wall time against an
#      uninterrupted run, and whether the final model's test loss is the same bits
#      (bit-identity of the parameters is a test: PsReplicas in
#      tests/cli_ps_replicas_test.cpp);
#   3. a stream of server deaths: the same job under launch --max-restarts,
#      ps 0 and ps 1 killed in turn every STREAM_EVERY seconds (5): each
#      kill's seconds until the workers took the replacement back, and the
#      final model's test loss against the uninterrupted run's;
#   4. async: the cost (2 PS + 4 workers, replicas 2 / 1: each push then
#      goes on from its primary to its backup before it is acknowledged),
#      and ps 0 killed halfway: whether every chunk on the survivor made
#      every update of the job (none lost, none applied twice), and the
#      seconds from the kill to the chief's next train record.
# Usage: bench/ps_replicas.sh [build dir] [repeats]
# PARTS (default "cost kill stream async") picks the parts to run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
TANDEM="$BUILD/tandem"
source bench/common.sh
scratch_out tandem-ps-replicas
need_fashion_mnist

CNN="--model cnn --dataset fashion-mnist --batch-size 32 --eval-every 1000000 --log-every 10 --progress plain"
plain() { local name=$1 ps=$2 workers=$3; shift 3; run "$name" "$TANDEM" launch --ps "$ps" --workers "$workers" -- "$@"; }
replicated() { local name=$1 ps=$2 workers=$3; shift 3; run "$name" "$TANDEM" launch --ps "$ps" --workers "$workers" -- "$@" --ps-replicas 2; }

PARTS=${PARTS:-cost kill stream async}
part() { [[ " $PARTS " == *" $1 "* ]]; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; best of $REPEATS"
if part cost; then
compare "cnn, 2 PS + 4 workers, sync (replicas 2 / 1)" cnn-2x4 "2 4 $CNN --max-steps ${CNN_STEPS:-300}" plain replicated
compare "cnn, 2 PS + 2 workers, sync (replicas 2 / 1)" cnn-2x2 "2 2 $CNN --max-steps ${CNN_STEPS:-300}" plain replicated
fi

if part kill; then

STEPS=${KILL_STEPS:-600}
echo "== killed ps 0 with replicas: cnn, 2 PS + 2 workers, sync, $STEPS steps"
start=$(date +%s.%N)
"$TANDEM" launch --ps 2 --workers 2 -- $CNN --max-steps "$STEPS" --ps-replicas 2 --out "$OUT/clean" >"$OUT/clean.log" 2>&1 \
  || { cat "$OUT/clean.log"; exit 1; }
clean_s=$(python3 -c "import time; print(time.time() - $start)")
start=$(date +%s.%N)
"$TANDEM" launch --ps 2 --workers 2 -- $CNN --max-steps "$STEPS" --ps-replicas 2 --out "$OUT/killed" >"$OUT/killed.log" 2>&1 &
launch_pid=$!
while ! grep -qs "\"step\":$((STEPS / 2))," "$OUT/killed/metrics.jsonl"; do sleep 0.02; done
killed_at=$(date +%s.%N)
pkill -KILL -f -- "--out $OUT/killed .*--job-name ps --task-index 0( |\$)"
wait "$launch_pid" || { cat "$OUT/killed.log"; exit 1; }
killed_s=$(python3 -c "import time; print(time.time() - $start)")
python3 - "$OUT" "$clean_s" "$killed_s" "$killed_at" <<'PY'
import json, sys
out, clean_s, killed_s, killed_at = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
record = json.loads(open(f"{out}/killed/restarts.jsonl").readline())
after = [r for r in map(json.loads, open(f"{out}/killed/metrics.jsonl")) if r.get("type") == "train" and r["time"] > killed_at]
clean = json.load(open(f"{out}/clean/summary.json"))
killed = json.load(open(f"{out}/killed/summary.json"))
print(f"   {record['failure']}; lost_updates {record['lost_updates']}, rolled_back {record['rolled_back']}")
print(f"   kill -> the chief's next train record (step {after[0]['step']}): {after[0]['time'] - killed_at:.2f} s "
      f"(records every 10 steps)")
print(f"   wall: uninterrupted {clean_s:.1f} s, killed {killed_s:.1f} s ({killed_s / clean_s:.2f}x)")
# The final model's test loss (an evaluation of the parameters); the last
# step's mean loss comes from whichever server answered the step report.
print(f"   steps {killed['steps']} of {clean['steps']}; final model's test loss the same bits: "
      f"{killed['test_loss'] == clean['test_loss']} ({killed['test_loss']!r}), "
      f"test accuracy {killed['test_accuracy']} vs {clean['test_accuracy']}")
PY
fi

if part stream; then
STREAM_STEPS=${STREAM_STEPS:-3000}
EVERY=${STREAM_EVERY:-5}
echo "== a stream of server deaths: cnn, 2 PS + 2 workers, sync, $STREAM_STEPS steps, a server killed every ${EVERY} s"
"$TANDEM" launch --ps 2 --workers 2 -- $CNN --max-steps "$STREAM_STEPS" --ps-replicas 2 --out "$OUT/stream-clean" \
  >"$OUT/stream-clean.log" 2>&1 || { cat "$OUT/stream-clean.log"; exit 1; }
"$TANDEM" launch --ps 2 --workers 2 --max-restarts 100 -- $CNN --max-steps "$STREAM_STEPS" --ps-replicas 2 \
  --out "$OUT/stream" >"$OUT/stream.log" 2>&1 &
launch_pid=$!
kills=0
backs=()
while kill -0 "$launch_pid" 2>/dev/null; do
  sleep "$EVERY"
  kill -0 "$launch_pid" 2>/dev/null || break
  victim=$((kills % 2))
  before=$(grep -c "worker 0: ps [0-9]* is back after step" "$OUT/stream.log" || true)
  killed_at=$(date +%s.%N)
  pkill -KILL -f -- "--out $OUT/stream .*--job-name ps --task-index $victim( |\$)" || break
  kills=$((kills + 1))
  while kill -0 "$launch_pid" 2>/dev/null; do
    now=$(grep -c "worker 0: ps [0-9]* is back after step" "$OUT/stream.log" || true)
    if ((now > before)); then
      backs+=("ps $victim $(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')") s")
      break
    fi
    sleep 0.01
  done
done
wait "$launch_pid" || { cat "$OUT/stream.log"; exit 1; }
echo "   $kills server(s) killed; each back in the job after: ${backs[*]}"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
records = [json.loads(line) for line in open(f"{out}/stream/restarts.jsonl")]
losses = [r for r in records if r.get("kind") == "server_replica"]
clean = json.load(open(f"{out}/stream-clean/summary.json"))
run = json.load(open(f"{out}/stream/summary.json"))
print(f"   restarts.jsonl: {len(losses)} server losses, lost_updates {sum(r['lost_updates'] for r in losses)}; "
      f"rejoined {run['strategy']['rejoined_servers']}")
print(f"   steps {run['steps']} of {clean['steps']}; final model's test loss the same bits: "
      f"{run['test_loss'] == clean['test_loss']} ({run['test_loss']!r}), "
      f"test accuracy {run['test_accuracy']} vs {clean['test_accuracy']}")
PY
fi

if part async; then
ASYNC="--ps-mode async --max-steps ${ASYNC_STEPS:-600}"
compare "cnn, 2 PS + 4 workers, async (replicas 2 / 1)" cnn-async-2x4 "2 4 $CNN $ASYNC" plain replicated
# GPU-like workers (--emulate-compute: timed waits from a profile), whose
# compute leaves the host's cores to the servers, as on GPU hosts.
EMULATED="--dataset synthetic --synthetic-shape 3x32x32 --threads 1 --eval-every 0 --progress plain --ps-mode async"
compare "resnet20 emulated (10 + 20 ms), 2 PS + 4 workers, async (replicas 2 / 1)" r20-async-2x4 \
  "2 4 --model resnet20 $EMULATED --emulate-compute profiles/test-gpu-resnet20.json --batch-size 64 --max-steps 1200" \
  plain replicated
compare "resnet110 emulated (TITAN X), 2 PS + 4 workers, async (replicas 2 / 1)" r110-async-2x4 \
  "2 4 --model resnet110 $EMULATED --emulate-compute profiles/resnet110-titanx-b128.json --batch-size 128 --max-steps 160" \
  plain replicated
echo "== killed ps 0 with replicas: cnn, 2 PS + 4 workers, async, ${ASYNC_STEPS:-600} steps"
"$TANDEM" launch --ps 2 --workers 4 -- $CNN $ASYNC --ps-replicas 2 --out "$OUT/async-killed" >"$OUT/async-killed.log" 2>&1 &
launch_pid=$!
# Halfway: the chief's records carry the job's global step.
halfway() {
  grep -so '"step":[0-9]*,"step_breakdown"' "$OUT/async-killed/metrics.jsonl" | tail -1 | tr -dc '0-9\n' \
    | awk -v half=$(( ${ASYNC_STEPS:-600} / 2 )) '{ n = $1 } END { exit !(n >= half) }'
}
until halfway; do sleep 0.02; done
killed_at=$(date +%s.%N)
pkill -KILL -f -- "--out $OUT/async-killed .*--job-name ps --task-index 0( |\$)"
wait "$launch_pid" || { cat "$OUT/async-killed.log"; exit 1; }
python3 - "$OUT" "$killed_at" <<'PY'
import json, sys
out, killed_at = sys.argv[1], float(sys.argv[2])
after = [r for r in map(json.loads, open(f"{out}/async-killed/metrics.jsonl")) if r.get("type") == "train" and r["time"] > killed_at]
survivor = json.load(open(f"{out}/async-killed/ps/ps-1/summary.json"))
updates = {c["updates"] for c in survivor["chunk_digests"].values()}
print(f"   kill -> the chief's next train record (step {after[0]['step']}): {after[0]['time'] - killed_at:.2f} s")
print(f"   ps 1: global step {survivor['global_step']}; each of its {survivor['chunks']} chunks made {sorted(updates)} "
      f"update(s); forwarded {survivor['forwards_in']} before the kill, {survivor['repeated_pushes']} push(es) sent "
      f"again and taken once")
PY
fi
