#!/usr/bin/env bash
# `srun -n 2 tandem train` on a real one-node Slurm (munged, slurmctld and
# slurmd, started here by local_slurm.sh and stopped on exit, failed or
# not): with no --coordinator and no MASTER_ADDR, the tasks find the
# coordinator from the step's node list and job id, and train as the same
# job does under `tandem launch`, to the same losses. Needs root and
# Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh).
# Then `srun -n 3 tandem train --ps 1`: the last task serves parameters.
# Usage: tests/slurm/srun_test.sh BUILD_DIR
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null || ! command -v srun >/dev/null; then
  echo "srun_test: skipped: starting Slurm's daemons needs root and Debian's slurmctld, slurmd, slurm-client, munge"
  exit 77
fi
BUILD=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
chmod 755 "$dir"  # munged runs as the munge user, under it
trap '"$here/local_slurm.sh" stop "$dir/slurm" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "srun_test: $*" >&2; exit 1; }
seconds_since() { python3 -c "import time; print(f'{time.time() - $1:.2f}')"; }

conf=$("$here/local_slurm.sh" start "$dir/slurm" | tail -n1)
export "${conf:?}"
args=(--model mlp --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096
      --batch-size 16 --threads 1 --max-steps 30 --eval-every 0 --progress plain --seed 3 --checkpoint-every 0)

# A hang would be a defect: srun is bounded, and one task's failure ends the step.
start=$(date +%s.%N)
if ! timeout 120 srun -n 2 --kill-on-bad-exit=1 "$BUILD/tandem" train "${args[@]}" --out "$dir/srun" \
    >"$dir/srun.log" 2>&1; then
  cat "$dir/srun.log"
  fail "srun -n 2 tandem train failed"
fi
srun_s=$(seconds_since "$start")
start=$(date +%s.%N)
"$BUILD/tandem" launch --workers 2 -- "${args[@]}" --out "$dir/launch" >"$dir/launch.log" 2>&1 ||
  { cat "$dir/launch.log"; fail "the same job under tandem launch failed"; }
launch_s=$(seconds_since "$start")

grep -q "worker 0: joined 2 workers via slurm" "$dir/srun.log" ||
  { cat "$dir/srun.log"; fail "worker 0 did not say it joined via slurm"; }
# The same job: the same steps and, to the bit, the same losses.
python3 - "$dir" <<'PY' || { cat "$dir/srun.log"; exit 1; }
import json, sys
d = sys.argv[1]
s, l = (json.load(open(f"{d}/{run}/summary.json")) for run in ("srun", "launch"))
for key in ("workers", "global_step", "final_loss", "test_loss"):
    assert s[key] == l[key], f"{key}: srun {s[key]}, launch {l[key]}"
assert s["global_step"] == 30 and s["workers"] == 2, s
PY
echo "srun_test: srun -n 2 trained 30 steps in ${srun_s} s (tandem launch: ${launch_s} s), with the same losses"

# --ps 1: the step's last task serves, publishing where it listens in worker
# 0's store; a sync PS job is the same job as under tandem launch --ps 1.
ps_args=(--ps-mode sync)
start=$(date +%s.%N)
if ! timeout 120 srun -n 3 --kill-on-bad-exit=1 "$BUILD/tandem" train "${args[@]}" "${ps_args[@]}" --ps 1 \
    --out "$dir/srun-ps" >"$dir/srun-ps.log" 2>&1; then
  cat "$dir/srun-ps.log"
  fail "srun -n 3 tandem train --ps 1 failed"
fi
srun_ps_s=$(seconds_since "$start")
start=$(date +%s.%N)
"$BUILD/tandem" launch --ps 1 --workers 2 -- "${args[@]}" "${ps_args[@]}" --out "$dir/launch-ps" \
  >"$dir/launch-ps.log" 2>&1 || { cat "$dir/launch-ps.log"; fail "the PS job under tandem launch failed"; }
launch_ps_s=$(seconds_since "$start")
grep -Eq "ps 0: listening on $(hostname -s):[0-9]+ for 2 worker\(s\) \(slurm\)" "$dir/srun-ps.log" ||
  { cat "$dir/srun-ps.log"; fail "task 2 did not serve as ps 0 on its node's name and a port of its own"; }
python3 - "$dir" <<'PY' || { cat "$dir/srun-ps.log"; exit 1; }
import json, sys
d = sys.argv[1]
s, l = (json.load(open(f"{d}/{run}/summary.json")) for run in ("srun-ps", "launch-ps"))
for key in ("workers", "global_step", "final_loss", "test_loss"):
    assert s[key] == l[key], f"{key}: srun {s[key]}, launch {l[key]}"
assert s["global_step"] == 30 and s["workers"] == 2, s
PY
# Too few tasks for --ps: exit 2, naming both counts.
set +e
timeout 60 srun -n 2 "$BUILD/tandem" train "${args[@]}" --ps 2 --out "$dir/bad" >"$dir/bad.log" 2>&1
code=$?
set -e
[[ $code -eq 2 ]] || { cat "$dir/bad.log"; fail "--ps 2 on 2 tasks exited $code, not 2"; }
grep -q "SLURM_NTASKS is 2, which leaves no task to train; the step needs at least 3 tasks" "$dir/bad.log" ||
  { cat "$dir/bad.log"; fail "--ps 2 on 2 tasks did not name both counts"; }
echo "srun_test: srun -n 3 --ps 1 trained 30 sync PS steps in ${srun_ps_s} s (tandem launch: ${launch_ps_s} s)," \
  "with the same losses; --ps 2 on 2 tasks exits 2"
