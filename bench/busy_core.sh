#!/usr/bin/env bash
# Training on a machine where another process holds a core: the small cnn
# on Fashion-MNIST (batch 64) with 1 thread, 2 threads and Tandem's own
# choice (no --threads), on a quiet machine and with one shell busy loop
# running, under each OpenMP wait policy given.
#   OUT=/tmp/busy REPEATS=2 POLICIES="default passive" bash bench/busy_core.sh
# A policy is "default" (Tandem's own choice), "active" (OpenMP's long spin:
# OMP_WAIT_POLICY=active) or "passive" (OMP_WAIT_POLICY=passive); each row
# is the best of REPEATS interleaved runs, in samples/s.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tandem-busy-core}
REPEATS=${REPEATS:-2}
STEPS=${STEPS:-150}
MODEL=${MODEL:-cnn}
POLICIES=${POLICIES:-default active passive}
TANDEM=${TANDEM:-build/tandem}
mkdir -p "$OUT"
busy_pid=""
stop_busy() { if [[ -n "$busy_pid" ]]; then kill "$busy_pid" 2>/dev/null || true; wait "$busy_pid" 2>/dev/null || true; busy_pid=""; fi; }
trap stop_busy EXIT

one() {  # policy load threads repeat
  local policy=$1 load=$2 threads=$3 i=$4 env=()
  [[ $policy == default ]] || env=(OMP_WAIT_POLICY="$policy")
  local dir="$OUT/$MODEL-$policy-$load-t$threads-$i" flag=()
  [[ $threads == auto ]] || flag=(--threads "$threads")
  env "${env[@]}" "$TANDEM" train --model "$MODEL" --dataset fashion-mnist --batch-size 64 --max-steps "$STEPS" \
    "${flag[@]}" --eval-every 0 --progress plain --log-every 1000 --overwrite --out "$dir" >"$dir.log" 2>&1 \
    || { cat "$dir.log"; exit 1; }
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['samples_per_sec'], s['threads'])" \
    "$dir/summary.json"
}

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $MODEL, batch 64, $STEPS steps; samples/s, best of $REPEATS"
printf '%-8s %-6s %10s %10s %16s\n' policy load "1 thread" "2 threads" "own choice"
for load in quiet busy; do
  if [[ $load == busy ]]; then bash -c 'while :; do :; done' & busy_pid=$!; fi
  declare -A best=() chose=()
  for i in $(seq "$REPEATS"); do
    for policy in $POLICIES; do
      for threads in 1 2 auto; do
        read -r rate used < <(one "$policy" "$load" "$threads" "$i")
        key="$policy-$threads"
        best[$key]=$(python3 -c "print(max(float('$rate'), float('${best[$key]:-0}')))")
        [[ $threads != auto ]] || chose[$policy]=$used
      done
    done
  done
  for policy in $POLICIES; do
    printf '%-8s %-6s %10.0f %10.0f %6.0f (%s thr)\n' "$policy" "$load" "${best[$policy-1]}" "${best[$policy-2]}" \
      "${best[$policy-auto]}" "${chose[$policy]}"
  done
  unset best chose
  stop_busy
done
