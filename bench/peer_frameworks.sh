#!/usr/bin/env bash
# Tandem against its peers on the users' workload: the 256-4096-4096-256 MLP
# (Linear+ReLU, Linear+ReLU, Linear; cross entropy over 256 classes; Adam
# lr 1e-4; batch 128 per worker; synthetic data), as aggregate worker steps/s
# (optimizer updates per second summed over the workers, each of one batch
# of 128) over the steps after warm-up:
#   standalone, CORES threads and 1 thread   TensorFlow 2 | Tandem | PyTorch eager
#   1 PS + 1, 2, 4 workers, async            TF1-style PS job | tandem launch --ps 1
#   2 workers, all-reduce                    PyTorch DDP (gloo, torchrun) | tandem launch
# TensorFlow is pip's tensorflow-cpu in a venv (.venv-peer, made on the first
# run, reused after); PyTorch is the project venv's torch (.venv, from
# scripts/setup.sh), the LibTorch that Tandem links. Every worker gets cores / workers on the host threads,
# Tandem's own rule, and a PS cores / servers, as `tandem launch` gives its
# servers. Rounds are interleaved (TF, Tandem, PyTorch, TF, ...)
# and each cell is the median over the rounds.
# Usage: [TANDEM=build/tandem] [OUT=runs/peer-frameworks] [ROUNDS=5] [STEPS=30] [WARMUP=5] bench/peer_frameworks.sh
#   STEPS, WARMUP: timed and untimed steps per worker (an async job runs
#   workers x (WARMUP + STEPS) global steps, shared by its workers)
#   RUN_TIMEOUT: seconds any one run may take (600); SKIP_TF=1: no TensorFlow
# Writes OUT/peer.md (the table), OUT/results/*.json (every run), OUT/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
TANDEM=${TANDEM:-build/tandem}
OUT=${OUT:-runs/peer-frameworks}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
VENV=${VENV:-.venv-peer}
# The project venv's python: its torch is the LibTorch Tandem links.
SYS_PYTHON=${SYS_PYTHON:-.venv/bin/python}
TORCHRUN=${TORCHRUN:-.venv/bin/torchrun}
CORES=$(nproc)
PS_THREADS=$CORES  # what `tandem launch --ps 1` gives its server (--ps-threads: cores / servers)
unset OMP_NUM_THREADS MKL_NUM_THREADS  # Tandem and torch would take it over the rule
export TF_CPP_MIN_LOG_LEVEL=2

[ -x "$TANDEM" ] || { echo "no tandem binary at $TANDEM (set TANDEM=...)"; exit 1; }
"$SYS_PYTHON" -c 'import torch' 2>/dev/null || { echo "$SYS_PYTHON cannot import torch (run scripts/setup.sh)"; exit 1; }
RESULTS=$OUT/results LOGS=$OUT/logs RUNS=$OUT/runs
rm -rf "$RESULTS" "$LOGS" "$RUNS" "$OUT/peer.md"
mkdir -p "$RESULTS" "$LOGS" "$RUNS"

# Leftovers: every process this script started (its descendants, by pid)
# goes with it, also on Ctrl-C (runs are waited for in the background so that
# the trap fires at once).
descendants() { local c; for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done; }
cleanup() {
  trap - EXIT INT TERM
  local pids; pids=$(descendants $$)
  [ -z "$pids" ] && return
  kill -TERM $pids 2>/dev/null || true; sleep 2; kill -KILL $pids 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo interrupted; exit 130' INT TERM

# ------------------------------------------------------------ TensorFlow venv
TF_PYTHON="" TF_SKIP=""
setup_tf() {
  if [ "${SKIP_TF:-0}" = 1 ]; then TF_SKIP="SKIP_TF=1"; return; fi
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import tensorflow' >/dev/null 2>&1; then
    TF_PYTHON=$VENV/bin/python; return
  fi
  local log=$LOGS/tf-install.log
  echo "installing tensorflow-cpu into $VENV (once; log: $log)"
  if ! { [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"; } >"$log" 2>&1; then
    TF_SKIP="could not create the venv $VENV: $(grep -v '^\s*$' "$log" | tail -1)"; return
  fi
  if ! timeout 1800 "$VENV/bin/pip" install --disable-pip-version-check tensorflow-cpu >>"$log" 2>&1; then
    TF_SKIP="pip install tensorflow-cpu failed: $(grep -E 'ERROR|rror' "$log" | tail -1)"; return
  fi
  if ! "$VENV/bin/python" -c 'import tensorflow' >>"$log" 2>&1; then
    TF_SKIP="tensorflow does not import: $(grep -v '^\s*$' "$log" | tail -1)"; return
  fi
  TF_PYTHON=$VENV/bin/python
}
setup_tf
if [ -n "$TF_SKIP" ]; then echo "skipping TensorFlow: $TF_SKIP"; fi

# ------------------------------------------------------------------- runners
# Each writes a raw result JSON ($1) or fails; $2 is the configuration key.
MLP="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128
     --eval-every 1000000 --checkpoint-secs 0 --progress plain --overwrite"

tandem_run() {  # result, run name, log-every, job steps, command...
  local result=$1 run=$RUNS/$2 every=$3 steps=$4; shift 4
  timeout -k 20 "$RUN_TIMEOUT" "$@" $MLP --log-every "$every" --max-steps "$steps" --out "$run" || return
  "$SYS_PYTHON" bench/peer/report.py tandem-rate "$run" "$result"
  find "$run" -name '*.ckpt' -delete  # 200+ MB of parameters and Adam state each
}

run_tf() {  # result, run name, threads, workers (0: standalone)
  local result=$1 threads=$3 workers=$4
  [ -n "$TF_PYTHON" ] || return 2
  if [ "$workers" = 0 ]; then
    timeout -k 20 "$RUN_TIMEOUT" "$TF_PYTHON" bench/peer/tf_bench.py standalone --threads "$threads" \
      --warmup "$WARMUP" --steps "$STEPS" --out "$result"
  else
    timeout -k 20 $((RUN_TIMEOUT + 30)) "$TF_PYTHON" bench/peer/tf_bench.py ps-job --workers "$workers" \
      --threads "$threads" --ps-threads "$PS_THREADS" --warmup "$WARMUP" --steps "$STEPS" --out "$result" \
      --logs "$RUNS/$2" --timeout "$RUN_TIMEOUT"
  fi
}

run_tandem() {  # result, run name, threads, workers (0: standalone), kind (ps|allreduce)
  local result=$1 name=$2 threads=$3 workers=$4 kind=${5:-}
  if [ "$workers" = 0 ]; then
    tandem_run "$result" "$name" "$WARMUP" $((WARMUP + STEPS)) "$TANDEM" train --threads "$threads"
  elif [ "$kind" = ps ]; then  # --max-steps and logging count the job's global steps
    tandem_run "$result" "$name" $((workers * WARMUP)) $((workers * (WARMUP + STEPS))) \
      "$TANDEM" launch --ps 1 --workers "$workers" -- --ps-mode async
  else
    tandem_run "$result" "$name" "$WARMUP" $((WARMUP + STEPS)) "$TANDEM" launch --workers "$workers" --
  fi
}

run_torch() {  # result, run name, threads, workers (0: standalone)
  local result=$1 threads=$3 workers=$4
  if [ "$workers" = 0 ]; then
    timeout -k 20 "$RUN_TIMEOUT" "$SYS_PYTHON" bench/peer/torch_bench.py standalone --threads "$threads" \
      --warmup "$WARMUP" --steps "$STEPS" --out "$result"
  else
    timeout -k 20 "$RUN_TIMEOUT" "$TORCHRUN" --nproc-per-node "$workers" \
      --master-addr 127.0.0.1 --master-port "$(free_port)" \
      bench/peer/torch_bench.py ddp --threads "$threads" --warmup "$WARMUP" --steps "$STEPS" --out "$result"
  fi
}
free_port() { "$SYS_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# measure ROUND CONFIG FRAMEWORK THREADS WORKERS [KIND]: one run (run name
# CONFIG-FRAMEWORK-ROUND: LOGS/NAME.log, RUNS/NAME/), its result in
# RESULTS/NAME.json with ok true, or ok false (the log's
# tail is printed) or skipped; the benchmark goes on either way.
measure() {
  local round=$1 config=$2 fw=$3; shift 3
  local name=$config-$fw-$round raw=$RESULTS/.$config-$fw-$round.raw rc=0
  local start=$SECONDS
  "run_$fw" "$raw" "$name" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  wait $! || rc=$?
  "$SYS_PYTHON" - "$raw" "$RESULTS/$name.json" "$config" "$fw" "$round" "$rc" <<'PY'
import json, os, sys
raw, out, config, fw, rnd, rc = sys.argv[1:]
r = json.load(open(raw)) if rc == "0" and os.path.exists(raw) else {}
r.update(config=config, framework=fw, round=int(rnd), ok=bool(r), skipped=rc == "2", rc=int(rc))
json.dump(r, open(out, "w"))
PY
  if [ "$rc" = 0 ] && [ -s "$raw" ]; then
    printf '  %-16s %-7s %7.2f steps/s  (%ds)\n' "$config" "$fw" \
      "$("$SYS_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["updates_per_s"])' "$raw")" \
      $((SECONDS - start))
  elif [ "$rc" = 2 ] && [ "$fw" = tf ]; then
    :
  else
    echo "  $config $fw: FAILED (exit $rc$([ "$rc" = 124 ] && echo ', timed out')); the log's end:"
    tail -n 15 "$LOGS/$name.log" | sed 's/^/    | /'
  fi
  rm -f "$raw"
}

# --------------------------------------------------------------- the configs
# key|label|threads per process|workers (0: standalone)|frameworks|tandem kind
CONFIGS=(
  "standalone-${CORES}t|standalone, $CORES threads|$CORES|0|tf tandem torch|"
  "standalone-1t|standalone, 1 thread|1|0|tf tandem torch|"
  "ps1-w1|1 PS + 1 worker, async|$CORES|1|tf tandem|ps"
  "ps1-w2|1 PS + 2 workers, async|$((CORES / 2 > 0 ? CORES / 2 : 1))|2|tf tandem|ps"
  "ps1-w4|1 PS + 4 workers, async|$((CORES / 4 > 0 ? CORES / 4 : 1))|4|tf tandem|ps"
  "allreduce-w2|2 workers, all-reduce|$((CORES / 2 > 0 ? CORES / 2 : 1))|2|tandem torch|allreduce"
)
[ "$CORES" -gt 1 ] || unset 'CONFIGS[1]'  # 1 core: one standalone row

header() {
  echo "# Tandem vs TensorFlow and PyTorch: MLP 256-4096-4096-256"
  echo
  echo "- machine: $CORES cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')); $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Tandem $("$TANDEM" --version 2>/dev/null | head -1 || echo '?') ($TANDEM, $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  if [ -n "$TF_PYTHON" ]; then
    echo "- TensorFlow $("$TF_PYTHON" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) (pip tensorflow-cpu, $VENV)"
  else
    echo "- TensorFlow: skipped ($TF_SKIP)"
  fi
  echo "- PyTorch $("$SYS_PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) (the project venv's, $SYS_PYTHON)"
  echo "- workload: Linear+ReLU, Linear+ReLU, Linear; cross entropy over 256 classes; Adam lr 1e-4; batch 128 per worker; synthetic data"
  echo "- cells: aggregate worker steps/s (optimizer updates per second summed over workers, each of batch 128; x128 = samples/s),"
  echo "  median of $ROUNDS interleaved rounds, each timing $STEPS steps per worker after $WARMUP warm-up steps (start-up excluded)"
  echo "- threads: every worker gets cores / workers on the host (a PS is not counted), Tandem's own rule, applied to TF"
  echo "  (intra and inter op threads) and PyTorch (torch.set_num_threads); a PS gets cores / servers = $PS_THREADS, as"
  echo "  tandem launch gives its servers (--ps-threads); standalone rows set the threads explicitly"
  echo "- TF standalone: TF2 Keras model, tf.function step. TF PS: tf.compat.v1 graph mode, ClusterSpec + train.Server,"
  echo "  replica_device_setter, MonitoredTrainingSession, async between-graph replication, PS in its own process;"
  echo "  its rate is the global step's as the chief sees it. Tandem PS: tandem launch --ps 1 --ps-mode async, --max-steps"
  echo "  counts the job's global steps. PyTorch: eager, torch.optim.Adam defaults; DDP over gloo under torchrun"
  echo
}

header | tee "$OUT/peer.md"
echo "progress (aggregate worker steps/s per run):"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS"
  for c in "${CONFIGS[@]}"; do
    IFS='|' read -r key label threads workers fws kind <<<"$c"
    for fw in $fws; do measure "$round" "$key" "$fw" "$threads" "$workers" $kind; done
  done
done

CONFIGS_JSON=$("$SYS_PYTHON" - "$ROUNDS" "${CONFIGS[@]}" <<'PY'
import json, sys
rounds = int(sys.argv[1])
print(json.dumps([dict(zip(["key", "label", "threads", "workers", "frameworks", "kind"], c.split("|")),
                       rounds_run=rounds) for c in sys.argv[2:]]))
PY
)
echo
echo "Tandem vs TensorFlow and PyTorch (aggregate worker steps/s, median of $ROUNDS rounds; higher is better)"
"$SYS_PYTHON" bench/peer/report.py table "$OUT" "$RESULTS" "$CONFIGS_JSON"
[ -z "$TF_SKIP" ] || echo "(TensorFlow skipped: $TF_SKIP)" | tee -a "$OUT/peer.md"
echo "written: $OUT/peer.md"
