#!/usr/bin/env bash
# What starting a 2-worker job costs under each engine against `tandem
# launch`, on one host: the wall time, from the command to its exit, of a
# job of one training step (so the start and the end are most of it).
# Engines: tandem launch; srun -n 2 on a local one-node Slurm (root only;
# the cluster's own start is not counted); torchrun's 2 nodes with the
# PET_* variables of a Kubeflow TrainJob; TF_CONFIG tasks as a TFJob starts
# them; mpirun over an MPIJob's hostfile; `tandem launch --hosts` over ssh
# to two loopback hosts (root only: the test's sshd, tests/ssh). Interleaved,
# best of REPEATS.
# Goal (issue 53): at most 2 s more than tandem launch on each.
# Usage: bench/cluster_start.sh [build dir] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
REPEATS=${2:-5}
PY=$PWD/.venv/bin/python
OUT=$(mktemp -d /tmp/tandem-bench.XXXXXX)
chmod 755 "$OUT"
slurm=""
ssh_hosts=""
if [[ $(id -u) -eq 0 && -x /usr/sbin/sshd ]]; then
  test_name=cluster_start
  source tests/ssh/with_local_sshd.sh  # sets its own EXIT trap; ours below calls it
  read -r -a ssh_flags <<<"$SSH_FLAGS"
  ssh_hosts=1
fi
trap '[[ -n $ssh_hosts ]] && stop_sshd; [[ -n $slurm ]] && tests/slurm/local_slurm.sh stop "$OUT/slurm" >/dev/null 2>&1; rm -rf "$OUT"' EXIT
ARGS=(--model mlp --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096
      --batch-size 16 --threads 1 --max-steps 1 --progress plain --seed 3)
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export PATH=$PATH:/usr/sbin:/sbin
if [[ $(id -u) -eq 0 ]] && command -v slurmctld >/dev/null; then
  conf=$(tests/slurm/local_slurm.sh start "$OUT/slurm" | tail -n1)
  export "${conf:?}"
  slurm=1
fi

launch() { "$BUILD/tandem" launch --workers 2 -- "${ARGS[@]}" --out "$OUT/$1"; }
srun2() { srun -n 2 "$BUILD/tandem" train "${ARGS[@]}" --out "$OUT/$1"; }
trainjob() {
  local port pids=()
  port=$(free_port)
  for rank in 0 1; do
    PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_NODE_RANK=$rank PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$port \
      "$(dirname "$PY")/torchrun" --no-python "$BUILD/tandem" train "${ARGS[@]}" --out "$OUT/$1" &
    pids+=($!)
  done
  wait "${pids[0]}" && wait "${pids[1]}"
}
tfjob() {
  local chief worker pids=()
  chief=127.0.0.1:$(free_port) worker=127.0.0.1:$(free_port)
  for task in chief worker; do
    TF_CONFIG="{\"cluster\":{\"chief\":[\"$chief\"],\"worker\":[\"$worker\"]},\"task\":{\"type\":\"$task\",\"index\":0},\"environment\":\"cloud\"}" \
      "$BUILD/tandem" train "${ARGS[@]}" --out "$OUT/$1" &
    pids+=($!)
  done
  wait "${pids[0]}" && wait "${pids[1]}"
}
mpijob() {
  printf '127.0.0.1 slots=2\n' >"$OUT/hostfile"
  OMPI_MCA_orte_default_hostfile=$OUT/hostfile mpirun --allow-run-as-root -np 2 "$BUILD/tandem" train "${ARGS[@]}" \
    --coordinator "127.0.0.1:$(free_port)" --out "$OUT/$1"
}

ssh2() { "$BUILD/tandem" launch "${ssh_flags[@]}" --hosts 127.0.0.2:1,127.0.0.3:1 -- "${ARGS[@]}" --out "$OUT/$1"; }

engines=(launch trainjob tfjob mpijob)
[[ -n $slurm ]] && engines+=(srun2)
[[ -n $ssh_hosts ]] && engines+=(ssh2)
declare -A best
for i in $(seq "$REPEATS"); do
  for e in "${engines[@]}"; do
    start=$(date +%s.%N)
    "$e" "$e-$i" >"$OUT/$e-$i.log" 2>&1 || { cat "$OUT/$e-$i.log"; exit 1; }
    s=$(python3 -c "import time; print(time.time() - $start)")
    best[$e]=$(python3 -c "print(min(float('${best[$e]:-inf}'), $s))")
  done
done
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; best of $REPEATS, seconds from the command to its exit"
for e in "${engines[@]}"; do
  python3 -c "import sys; e, t, l = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]); print(f'{e:>9}: {t:5.2f} s  ({t - l:+.2f} s against tandem launch)')" \
    "$e" "${best[$e]}" "${best[launch]}"
done
