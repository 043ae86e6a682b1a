#!/usr/bin/env bash
# The batch scripts of examples/slurm/ under sbatch on a real one-node
# Slurm (local_slurm.sh, stopped on exit, failed or not):
#   allreduce.sbatch is preempted (USR1 to its tasks, as --signal=USR1@60
#     sends 60 s before the time limit): the tasks checkpoint and exit 130,
#     the script requeues the job, and its next run resumes from that
#     checkpoint and ends the job where an unbroken run ends;
#   ps.sbatch runs a server and two workers; multinode.sbatch runs on the
#     one node this cluster has (-N 1 on the command line).
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge.
# Usage: tests/slurm/sbatch_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SOURCE=$(cd "$2" && pwd)
examples=$SOURCE/examples/slurm
test_name=sbatch_test
source "$SOURCE/tests/slurm/with_local_slurm.sh"
export PATH=$BUILD:$PATH  # the batch scripts run `tandem`; sbatch passes the environment on

tiny=(--model mlp --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096
      --batch-size 16 --threads 1 --eval-every 0 --progress plain --seed 3)
field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
# Waits until job $1 is COMPLETED; fails naming its state if it ends otherwise or takes over $2 s.
await_done() {
  local state
  for ((i = 0; i < $2 * 10; i++)); do
    state=$(field "$1" JobState)
    case $state in
      COMPLETED) return 0 ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) scontrol show job "$1"; return 1 ;;
    esac
    sleep 0.1
  done
  scontrol show job "$1"
  return 1
}
run_job() {  # name script sbatch-options... -- flags...: submits, waits, checks the summary's steps
  local name=$1 script=$2 job; shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  job=$(TANDEM_OUT="$dir/$name" sbatch --parsable -D "$dir" -o "$dir/$name.out" "${opts[@]}" "$examples/$script" "$@")
  await_done "$job" 90 || { cat "$dir/$name.out"; fail "$script did not complete"; }
}

# 1. Preempted and requeued: the second run resumes the first's checkpoint.
steps=400
ar_flags=("${tiny[@]}" --max-steps $steps --checkpoint-every 40 --debug-step-delay-ms 15)
job=$(TANDEM_OUT="$dir/ar" sbatch --parsable -D "$dir" -o "$dir/ar.out" -N 1 --ntasks-per-node 2 \
  "$examples/allreduce.sbatch" "${ar_flags[@]}")
for ((i = 0; i < 600; i++)); do
  [[ -e $dir/ar/checkpoints/latest ]] && break
  sleep 0.1
done
[[ -e $dir/ar/checkpoints/latest ]] || { cat "$dir/ar.out"; fail "allreduce.sbatch wrote no checkpoint within 60 s"; }
scancel -s USR1 "$job"
await_done "$job" 120 || { cat "$dir/ar.out"; fail "the preempted allreduce.sbatch did not complete"; }
[[ $(field "$job" Restarts) == 1 ]] || { cat "$dir/ar.out"; fail "the job ran $(field "$job" Restarts) restarts, not 1"; }
"$BUILD/tandem" launch --workers 2 -- "${ar_flags[@]}" --out "$dir/unbroken" >"$dir/unbroken.log" 2>&1 ||
  { cat "$dir/unbroken.log"; fail "the unbroken run failed"; }
python3 "$SOURCE/tests/support/same_job.py" "$dir/ar" "$dir/unbroken" --steps "$steps" --workers 2 \
  --keys final_loss,test_loss || { cat "$dir/ar.out"; fail "the requeued job ended apart from the unbroken run"; }
grep -Eq "resumed from $dir/ar/checkpoint.ckpt at step [1-9][0-9]*$" "$dir/ar.out" ||
  { cat "$dir/ar.out"; fail "the requeued run did not resume from the checkpoint"; }

# 2. The PS and multi-node scripts, each to the end.
run_job ps ps.sbatch -N 1 --ntasks-per-node 3 -- "${tiny[@]}" --max-steps 30
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['workers'] == 2 and s['global_step'] > 0, s" \
  "$dir/ps/summary.json" || { cat "$dir/ps.out"; fail "ps.sbatch did not train 2 workers"; }
[[ -f $dir/ps/ps/ps-0/summary.json ]] || { cat "$dir/ps.out"; fail "ps.sbatch ran no server"; }
run_job multinode multinode.sbatch -N 1 --ntasks-per-node 2 -- "${tiny[@]}" --max-steps 30
echo "sbatch_test: allreduce.sbatch preempted, requeued and resumed to step $steps with the unbroken run's loss;" \
  "ps.sbatch and multinode.sbatch ran to the end"
