#!/usr/bin/env bash
# A stream of deaths in one live job: the cnn on Fashion-MNIST, WORKERS
# workers under `tandem launch --max-restarts N`; every PERIOD seconds for
# DURATION seconds a random victim is killed with SIGKILL, and the launcher
# starts it again into the running job.
# - SERVERS=0 (default): all-reduce with --min-workers WORKERS/2; any
#   worker is a victim, worker 0 too (the launcher serves the store).
# - SERVERS=2: parameter servers with --ps-replicas 2, async unless
#   PS_MODE=sync; the victims are the servers and every worker, worker 0
#   too. A killed server's replacement is brought up by the other (sync: set
#   up by the chief at a step boundary), and a killed worker's joins the
#   running job (worker 0's as the chief again: the launcher serves the store;
#   sync: at a step boundary).
# Reports whether the job finished, each kill against the records in
# OUT/restarts.jsonl, and what was lost: all-reduce, the updates its
# membership records count and the time from each kill to every worker
# training again; parameter servers, whether every chunk on each server
# ended with one update per step of the job and both holders with the same
# bits, and the time from each kill to the chief's next record.
# An async job's steps are whole-model updates, each of one worker's batch:
# give it about WORKERS times an all-reduce job's to last as long.
# Usage: [SERVERS=2 [PS_MODE=sync]] bench/live_chaos.sh [build dir] [workers] [steps] [period s] [duration s] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORKERS=${2:-8}
STEPS=${3:-3000}
PERIOD=${4:-15}
DURATION=${5:-180}
SEED=${6:-1}
SERVERS=${SERVERS:-0}
PS_MODE=${PS_MODE:-async}
TANDEM="$BUILD/tandem"
OUT=$(mktemp -d /tmp/tandem-chaos-bench.XXXXXX)
# KEEP=1 keeps the run's directory and log for a look afterwards.
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$OUT"' EXIT; else echo "   kept in $OUT"; fi
KILLS=$((DURATION / PERIOD))

if ((SERVERS > 0)); then
  job="$PS_MODE, $SERVERS parameter servers with --ps-replicas 2, $WORKERS workers"
  launch=(--ps "$SERVERS" --workers "$WORKERS")
  mode=(--ps-mode "$PS_MODE" --ps-replicas 2 --checkpoint-every 1000)
  if [ "$PS_MODE" = async ]; then mode+=(--staleness-lr on); fi
  victims=$((SERVERS + WORKERS))
else
  job="all-reduce, $WORKERS workers"
  launch=(--workers "$WORKERS")
  mode=(--min-workers $((WORKERS / 2)) --verify-replicas-every 50)
  victims=$WORKERS
fi
# Victim v: a server below SERVERS, then the workers.
victim_name() {
  local v=$1
  if ((v < SERVERS)); then echo "ps $v"; else echo "worker $((v - SERVERS))"; fi
}

echo "== cnn, Fashion-MNIST, $job, $STEPS steps, a victim killed every ${PERIOD}s for ${DURATION}s" \
  "($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
started=$(date +%s.%N)
"$TANDEM" launch "${launch[@]}" --max-restarts "$KILLS" -- --model cnn --dataset fashion-mnist \
  --batch-size 32 --threads 1 --lr 0.05 --max-steps "$STEPS" --seed "$SEED" --log-every 10 --eval-every 0 \
  "${mode[@]}" --out "$OUT/run" >"$OUT/log" 2>&1 &
launch_pid=$!
while ! [ -s "$OUT/run/metrics.jsonl" ]; do sleep 0.1; done
RANDOM=$SEED
: >"$OUT/kills"
for ((k = 0; k < KILLS; k++)); do
  sleep "$PERIOD"
  kill -0 "$launch_pid" 2>/dev/null || break
  v=$((RANDOM % victims))  # drawn here: a subshell's RANDOM is seeded anew
  name=$(victim_name "$v")
  at=$(date +%s.%N)
  role=${name% *}
  # A victim already gone (the job ending) is no kill.
  if pkill -KILL -f -- "--out $OUT/run .*--job-name $role --task-index ${name#* }( |\$)"; then
    echo "$name|$at" >>"$OUT/kills"
  fi
done
code=0
wait "$launch_pid" || code=$?
wall=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")

python3 - "$OUT" "$code" "$wall" "$WORKERS" "$SERVERS" <<'PY'
import glob, json, os, sys
out, code, wall, workers, servers = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
kills = [(n, float(t)) for n, t in (l.strip().split("|") for l in open(f"{out}/kills"))]
path = f"{out}/run/restarts.jsonl"
records = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
summary = json.load(open(f"{out}/run/summary.json")) if code == 0 else {}
restarts = [r for r in records if r.get("replaced")]
changes = [r for r in records if r.get("kind") == "membership"]
print(f"   killed, in order: {', '.join(n for n, _ in kills)}")
print(f"   launch exit {code} after {wall} s; {len(kills)} kills, {len(restarts)} restarts by launch, "
      f"{len(changes)} membership changes, lost updates {sum(r['lost_updates'] for r in records if 'lost_updates' in r)}, "
      f"rolled back {any(r.get('rolled_back') for r in records)}")
if summary:
    print(f"   at the end: {summary['workers']} workers, step {summary['steps']} of {summary['planned_steps']}, "
          f"test accuracy {summary['test_accuracy']:.4f}, membership changes {summary['membership_changes']}")
missing = [n for n, at in kills if not any(r["time"] >= at and r["replaced"] == n for r in restarts)]
backs = []
if servers == 0:
    for name, at in kills:
        worker = int(name.split()[1])
        full = [r for r in changes if r["time"] > at and worker in r["joined"] and r["workers_after"] == workers]
        if full:
            backs.append(full[0]["time"] - at)
    what = f"kill -> all {workers} training again"
else:
    metrics = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl")]
    trains = [m["time"] for m in metrics if m["type"] == "train"]
    returns = [m["time"] for m in metrics if m["type"] == "chief_returned"]
    chief_backs = []
    for name, at in kills:
        # A killed chief's next record is its replacement's, after it returned.
        since = at if name != "worker 0" else next((t for t in returns if t > at), None)
        after = [t for t in trains if since is not None and t > since]
        if after:
            (chief_backs if name == "worker 0" else backs).append(after[0] - at)
    what = "kill -> the chief's next record (every 10 steps)"
    if chief_backs:
        print(f"   worker 0 killed {len(chief_backs)} time(s); kill -> the new chief's first record: "
              f"{min(chief_backs):.2f}-{max(chief_backs):.2f} s")
    ps = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/run/ps/ps-*/summary.json"))]
    steps = ps[0]["global_step"] if ps else None
    # A worker killed between its pushes and its step report leaves updates
    # no report counts: each chunk makes at least the job's steps.
    extra = [c["updates"] - steps for s in ps for c in s["chunk_digests"].values()]
    same = all(ps[0]["chunk_digests"][k] == s["chunk_digests"][k]
               for s in ps[1:] for k in s["chunk_digests"] if k in ps[0]["chunk_digests"])
    print(f"   servers at the end: global step {steps}; each chunk's updates beyond it: {min(extra)}-{max(extra)}; "
          f"both holders of each chunk the same updates and bits: {same}; pushes taken once though sent twice: "
          f"{sum(s.get('repeated_pushes', 0) for s in ps)}")
print(f"   every kill recorded: {not missing}{'' if not missing else f' (missing: {missing})'}; {what}: " +
      (f"{min(backs):.2f}-{max(backs):.2f} s over {len(backs)} kills" if backs else "never"))
PY
