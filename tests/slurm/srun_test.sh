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
BUILD=$(cd "$1" && pwd)
SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
test_name=srun_test
source "$SOURCE/tests/slurm/with_local_slurm.sh"
seconds_since() { python3 -c "import time; print(f'{time.time() - $1:.2f}')"; }
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
python3 "$SOURCE/tests/support/same_job.py" "$dir/srun" "$dir/launch" --steps 30 --workers 2 ||
  { cat "$dir/srun.log"; fail "srun's job differs from tandem launch's"; }
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
python3 "$SOURCE/tests/support/same_job.py" "$dir/srun-ps" "$dir/launch-ps" --steps 30 --workers 2 ||
  { cat "$dir/srun-ps.log"; fail "srun's PS job differs from tandem launch's"; }
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
