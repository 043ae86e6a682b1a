#!/usr/bin/env bash
# Kubernetes controllers' contracts, on loopback: a 2-node job started with
# exactly the variables each controller sets in its pods (taken from the
# controllers' own source), then checked against the same job under
# `tandem launch`. PART:
#   trainjob: Kubeflow Trainer v2's torch plugin sets PET_NNODES,
#     PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's completion index),
#     PET_MASTER_ADDR (<job>-node-0-0.<job>) and PET_MASTER_PORT (29500);
#     the container runs `torchrun --no-python tandem train ...`;
#   tfjob: the TFJob controller sets TF_CONFIG per replica: cluster with
#     chief, worker and ps lists (<job>-<type>-<i>.<ns>.svc:2222; the
#     evaluator is left out), task {type, index}, environment "cloud". An
#     Evaluator replica follows the chief's checkpoints;
#   mpijob: mpi-operator's launcher runs mpirun over the hostfile it mounts
#     (OMPI_MCA_orte_default_hostfile) with its Open MPI variables.
# Hosts are 127.0.0.1 and ports free ones here, in place of the pods' DNS
# names and fixed ports. Usage: contract_test.sh BUILD_DIR PYTHON PART
set -euo pipefail
BUILD=$(cd "$1" && pwd)
PY=$2
PART=$3
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
fail() { echo "contract_test $PART: $*" >&2; exit 1; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
args=(--model mlp --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096
      --batch-size 16 --threads 1 --max-steps 30 --progress plain --seed 3)
# Waits for every started task; fails naming the first that failed.
await_all() {
  local i code
  for i in "${!pids[@]}"; do
    code=0
    wait "${pids[$i]}" || code=$?
    if ((code != 0)); then
      tail -n 30 "$dir"/*.log
      fail "task $i exited $code"
    fi
  done
  pids=()
}
same_losses() {  # run-a run-b
  "$PY" "$(dirname "$0")/../support/same_job.py" "$dir/$1" "$dir/$2" || fail "$1 ended apart from tandem launch's run"
}

case "$PART" in
trainjob)
  torchrun=$(dirname "$PY")/torchrun
  export PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT
  PET_MASTER_PORT=$(free_port)
  for rank in 0 1; do
    PET_NODE_RANK=$rank timeout 120 "$torchrun" --no-python "$BUILD/tandem" train "${args[@]}" \
      --out "$dir/trainjob" >"$dir/node-$rank.log" 2>&1 &
    pids+=($!)
  done
  await_all
  unset PET_NNODES PET_NPROC_PER_NODE PET_MASTER_ADDR PET_MASTER_PORT
  grep -q "joined 2 workers via torchrun" "$dir/node-0.log" || { cat "$dir/node-0.log"; fail "not joined via torchrun"; }
  "$BUILD/tandem" launch --workers 2 -- "${args[@]}" --out "$dir/launch" >"$dir/launch.log" 2>&1 ||
    { cat "$dir/launch.log"; fail "tandem launch failed"; }
  same_losses trainjob launch
  echo "contract_test trainjob: 2 nodes under torchrun with PET_* as the torch plugin sets them end as tandem launch does"
  ;;
tfjob)
  chief=127.0.0.1:$(free_port) worker=127.0.0.1:$(free_port) ps=127.0.0.1:$(free_port)
  tf_config() {  # type index
    "$PY" -c 'import json, sys; c, w, p, t, i = sys.argv[1:]
print(json.dumps({"cluster": {"chief": [c], "ps": [p], "worker": [w]}, "task": {"type": t, "index": int(i)},
                  "environment": "cloud"}))' "$chief" "$worker" "$ps" "$1" "$2"
  }
  # Slowed, so that the evaluator, up in about a second, sees checkpoints come.
  tf_args=("${args[@]}" --ps-mode sync --checkpoint-every 10 --debug-step-delay-ms 100)
  for task in chief:0 worker:0 ps:0 evaluator:0; do
    TF_CONFIG=$(tf_config "${task%:*}" "${task#*:}") timeout 120 "$BUILD/tandem" train "${tf_args[@]}" \
      --out "$dir/tfjob" >"$dir/${task%:*}.log" 2>&1 &
    pids+=($!)
  done
  await_all
  "$BUILD/tandem" launch --ps 1 --workers 2 -- "${tf_args[@]}" --out "$dir/launch" >"$dir/launch.log" 2>&1 ||
    { cat "$dir/launch.log"; fail "tandem launch failed"; }
  same_losses tfjob launch
  # The evaluator took the chief's checkpoints as they came, and the last is the final model's.
  "$PY" - "$dir/tfjob" <<'PY' || { cat "$dir/evaluator.log"; exit 1; }
import json, sys
out = sys.argv[1]
records = [json.loads(l) for l in open(f"{out}/evaluator/metrics.jsonl")]
chief = json.load(open(f"{out}/summary.json"))
steps = [r["global_step"] for r in records]
assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
assert steps[-1] == chief["global_step"] == 30, (steps, chief["global_step"])
assert len(steps) >= 2, f"the evaluator saw only the final checkpoint: {steps}"
assert records[-1]["checkpoint"] == "checkpoint.ckpt", records[-1]
for key in ("test_accuracy", "test_loss"):
    assert records[-1][key] == chief[key], f"{key}: evaluator {records[-1][key]}, chief {chief[key]}"
summary = json.load(open(f"{out}/evaluator/summary.json"))
assert summary["evaluations"] == len(records), summary
print(f"evaluator: {len(records)} checkpoint(s), steps {steps}")
PY
  grep -q "evaluator: the chief's run is over" "$dir/evaluator.log" || { cat "$dir/evaluator.log"; fail "no end"; }
  echo "contract_test tfjob: chief, worker and ps with TFJob's TF_CONFIG end as tandem launch --ps 1 does;" \
    "the evaluator followed the chief's checkpoints to the final one"
  ;;
mpijob)
  # mpi-operator's launcher: the hostfile it mounts and the Open MPI
  # variables it sets; worker 0's pod is the coordinator (--coordinator).
  printf '127.0.0.1 slots=2\n' >"$dir/hostfile"
  OMPI_MCA_orte_default_hostfile=$dir/hostfile OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10" \
    OMPI_MCA_orte_keep_fqdn_hostnames=true OMPI_MCA_orte_set_default_slots=2 \
    timeout 120 mpirun --allow-run-as-root -np 2 "$BUILD/tandem" train "${args[@]}" \
    --coordinator "127.0.0.1:$(free_port)" --out "$dir/mpijob" >"$dir/mpijob.log" 2>&1 ||
    { cat "$dir/mpijob.log"; fail "mpirun over the hostfile failed"; }
  grep -q "joined 2 workers via mpirun" "$dir/mpijob.log" || { cat "$dir/mpijob.log"; fail "not joined via mpirun"; }
  "$BUILD/tandem" launch --workers 2 -- "${args[@]}" --out "$dir/launch" >"$dir/launch.log" 2>&1 ||
    { cat "$dir/launch.log"; fail "tandem launch failed"; }
  same_losses mpijob launch
  echo "contract_test mpijob: mpirun over an MPIJob's hostfile and variables ends as tandem launch does"
  ;;
*)
  fail "unknown part '$PART' (trainjob, tfjob or mpijob)"
  ;;
esac
