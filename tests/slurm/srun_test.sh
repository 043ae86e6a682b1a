#!/usr/bin/env bash
# `srun -n 2 tandem train` on a real one-node Slurm (munged, slurmctld and
# slurmd, started here by local_slurm.sh and stopped on exit, failed or
# not): with no --coordinator and no MASTER_ADDR, the tasks find the
# coordinator from the step's node list and job id, and train as the same
# job does under `tandem launch`, to the same losses. Needs root and
# Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh).
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
