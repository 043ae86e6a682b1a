#!/usr/bin/env bash
# Horovod's elastic API under `tandem launch --min-workers 2`, with a
# Horovod elastic script (tests/python/elastic_train.py) on 3 workers:
#   1. worker 2 killed mid-run, no restart: the two others catch
#      HorovodInternalError, restore their last commit, agree on the new
#      members in-process and finish at size 2, their replicas equal;
#   2. worker 0 killed, launch --max-restarts 1: its replacement joins at
#      the others' next commit (HostsUpdatedInterrupt) as rank 0, the state
#      is synced from a survivor (not from the newcomer's fresh model) and
#      all three finish at size 3, replicas equal, having learned;
#   3. the same script without --min-workers: a killed worker fails the
#      job, named by launch (tests/python/horovod_api.py checks the hint
#      hvd.elastic.run gives in a job whose membership is fixed);
#   4. 2 workers with launch --max-workers 3 and a discovery script that
#      lists a third slot once worker 1 trains: launch starts worker 2,
#      beyond the list; it joins at the others' next commit
#      (HostsUpdatedInterrupt) and all three finish at size 3, replicas
#      equal, the state synced from the members.
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
PY=$3
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
SCRIPT="$SOURCE_DIR/tests/python/elastic_train.py"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# run NAME VICTIM LAUNCH_FLAGS [SIZE]: launches 3 workers, kills worker
# VICTIM's Python once it has committed its first batch, waits; sets $code.
# SIZE: the ranks wait for the job to be that big again before finishing.
run() {
  mkdir -p "$WORK/$1"
  # shellcheck disable=SC2086
  "$BUILD_DIR/tandem" launch --workers 3 $3 -- "$PY" "$SCRIPT" "$WORK/$1" 0.02 ${4:-} >"$WORK/$1.log" 2>&1 &
  local pid=$!
  local victim=""
  for _ in $(seq 1 600); do
    # the worker's Python process, found by the rank launch gave it
    victim=$(pgrep -f "elastic_train.py $WORK/$1 " | while read -r p; do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$p"; fi
    done | head -n 1)
    [[ -n $victim ]] && break
    sleep 0.1
  done
  [[ -n $victim ]] || { echo "FAIL: $1: worker $2 never started"; cat "$WORK/$1.log"; exit 1; }
  for _ in $(seq 1 1200); do
    grep -q "^\[worker $2\] training: " "$WORK/$1.log" && break
    sleep 0.1
  done
  grep -q "^\[worker $2\] training: " "$WORK/$1.log" \
    || { echo "FAIL: $1: worker $2 never trained"; cat "$WORK/$1.log"; exit 1; }
  kill -9 "$victim"
  code=0
  wait "$pid" || code=$?
}

check() {  # NAME SIZE: every rank file agrees
  "$PY" - "$WORK/$1" "$2" <<'PY' || { echo "FAIL: $1"; cat "$WORK/$1.log"; exit 1; }
import glob, json, sys
out, size = sys.argv[1], int(sys.argv[2])
ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/rank*.json"))]
assert len(ranks) == size, f"{len(ranks)} ranks finished, expected {size}: {ranks}"
assert all(r["size"] == size for r in ranks), ranks
assert sorted(r["rank"] for r in ranks) == list(range(size)), ranks
sums = {round(r["checksum"], 9) for r in ranks}
assert len(sums) == 1, f"the replicas differ: {ranks}"
# The ranks that lived through the change reset (a joiner starts after it), each ending at the final size.
survivors = [r for r in ranks if r["resets"]]
assert len(survivors) >= 2, f"fewer than the two survivors reset: {ranks}"
assert all(r["resets"][-1] == size for r in survivors), f"a reset callback saw another size: {ranks}"
assert all(r["loss"] < 0.2 * r["initial_loss"] for r in ranks), f"did not learn: {ranks}"
# After a change every rank holds trained state, the survivors' (each had
# committed a batch): none starts again from the seed's untrained model, as
# it would if a joiner's fresh model were synced to the others.
for r in ranks:
    after_change = r["entry_losses"][1:] if r["resets"] else r["entry_losses"]
    assert r["initial_loss"] not in after_change, f"rank {r['rank']} went on from an untrained model: {ranks}"
print(f"{out.rsplit('/', 1)[-1]}: {size} ranks finished, replicas equal, resets {[r['resets'] for r in ranks]}, "
      f"loss {ranks[0]['initial_loss']:.4f} -> {ranks[0]['loss']:.4f}")
PY
}

run shrink 2 "--min-workers 2"
[[ $code -eq 0 ]] || { echo "FAIL: shrink: launch exited $code"; cat "$WORK/shrink.log"; exit 1; }
check shrink 2

run rejoin 0 "--min-workers 2 --max-restarts 1" 3
[[ $code -eq 0 ]] || { echo "FAIL: rejoin: launch exited $code"; cat "$WORK/rejoin.log"; exit 1; }
grep -q "a new worker 0 joins it" "$WORK/rejoin.log" || { echo "FAIL: rejoin: no replacement"; cat "$WORK/rejoin.log"; exit 1; }
check rejoin 3

run fixed 2 ""
[[ $code -eq 1 ]] || { echo "FAIL: fixed: launch exited $code after a killed worker"; cat "$WORK/fixed.log"; exit 1; }
grep -q "worker 2 (pid [0-9]*) was killed by signal 9" "$WORK/fixed.log" \
  || { echo "FAIL: fixed: the dead worker is not named"; cat "$WORK/fixed.log"; exit 1; }
mkdir -p "$WORK/grow"
echo "localhost:2" >"$WORK/slots"
printf '#!/bin/sh\ncat %s\n' "$WORK/slots" >"$WORK/discover.sh"
chmod +x "$WORK/discover.sh"
"$BUILD_DIR/tandem" launch --workers 2 --min-workers 2 --max-workers 3 --host-discovery-script "$WORK/discover.sh" \
  -- "$PY" "$SCRIPT" "$WORK/grow" 0.02 3 >"$WORK/grow.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  grep -q "^\[worker 1\] training: " "$WORK/grow.log" && break
  sleep 0.1
done
echo "localhost:3" >"$WORK/slots"
code=0
wait "$pid" || code=$?
[[ $code -eq 0 ]] || { echo "FAIL: grow: launch exited $code"; cat "$WORK/grow.log"; exit 1; }
grep -q "the discovery script lists 3 slot(s) here: worker 2 starts and joins the running job" "$WORK/grow.log" \
  || { echo "FAIL: grow: launch started no third worker"; cat "$WORK/grow.log"; exit 1; }
check grow 3
echo "PASS"
