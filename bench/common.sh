# Helpers shared by the bench/*.sh scripts; source it after setting OUT.
# Runs are interleaved (A B A B ...) and each side keeps its best, so drift
# on a shared machine hits both sides alike.

run() {  # name, command...: runs it with --out OUT/name, log in OUT/name.log
  local name=$1; shift
  "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1 || { cat "$OUT/$name.log"; exit 1; }
}

summary() {  # run dirs...: best samples/s and that run's breakdown, as JSON
  python3 - "$@" <<'PY'
import json, sys
best = max((json.load(open(d + "/summary.json")) for d in sys.argv[1:]), key=lambda s: s["samples_per_sec"])
b = best["step_breakdown"]
print(json.dumps({"samples_per_sec": best["samples_per_sec"], "step_ms": 1e3 * b["step"],
                  "threads": best.get("threads"), "local_processes": best.get("local_processes"),
                  "breakdown_ms": {k: round(1e3 * v, 2) for k, v in b.items() if k != "step"}}))
PY
}

ratio() { python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(f'{a[\"samples_per_sec\"]/b[\"samples_per_sec\"]:.3f}')" "$1" "$2"; }

# compare LABEL NAME ARGS A B: runs functions `A name-A-i ARGS` and
# `B name-B-i ARGS` interleaved REPEATS times and prints B/A with both
# sides' best summaries.
compare() {
  local label=$1 name=$2 args=$3 a=$4 b=$5; local ra=() rb=()
  for i in $(seq "$REPEATS"); do
    "$a" "$name-$a-$i" $args; ra+=("$OUT/$name-$a-$i")
    "$b" "$name-$b-$i" $args; rb+=("$OUT/$name-$b-$i")
  done
  local sa sb; sa=$(summary "${ra[@]}"); sb=$(summary "${rb[@]}")
  echo "== $name: $label: $(ratio "$sb" "$sa")"
  echo "   $a: $sa"
  echo "   $b: $sb"
}

# scratch_out PREFIX: OUT becomes a fresh directory under /tmp, removed on exit.
scratch_out() {
  OUT=$(mktemp -d "/tmp/$1.XXXXXX")
  trap 'rm -rf "$OUT"' EXIT
}

# need_fashion_mnist: exits 1, saying where it comes from, when the dataset is missing.
need_fashion_mnist() {
  [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] \
    || { echo "Fashion-MNIST is missing (scripts/setup.sh installs it)"; exit 1; }
}

# mode_flags MODE: the train flags of one accuracy-bench mode, from the
# caller's SYNC (sync's optimizer), INNER and OUTER (DiLoCo's). At sync's
# rate: sync; async (plain: --staleness-lr off, as before it was on by
# default); adef (async with the defaults); dc (DC-ASGD adaptive, LAMBDA0, 2) and dcc (constant,
# DCC_LAMBDA, 0.04); slr (--staleness-lr on, without the momentum
# correction); both (slr and dc); slrm, slr with momentum SLRM_MOMENTUM (0.6).
# hN DiLoCo, aN async DiLoCo, sN streaming DiLoCo (FRAGMENTS 4, DELAY 1,
# MIX 0.5), each with H = N. A suffix q8 or q4 (h50q4) adds --push-bits 8
# or 4. Exits 2 on another.
mode_flags() {
  local mode=$1 bits=""
  if [[ $mode =~ ^(.+)q([48])$ ]]; then
    mode=${BASH_REMATCH[1]}
    bits=" --push-bits ${BASH_REMATCH[2]}"
  fi
  local flags
  flags=$(mode_flags_of "$mode") || exit 2
  echo "$flags$bits"
}

mode_flags_of() {
  case $1 in
    sync) echo "$SYNC" ;;
    async) echo "$SYNC --ps-mode async --staleness-lr off" ;;
    adef) echo "$SYNC --ps-mode async" ;;
    dc) echo "$SYNC --ps-mode async --staleness-lr off --delay-compensation ${LAMBDA0:-2}" ;;
    dcc) echo "$SYNC --ps-mode async --staleness-lr off --delay-compensation ${DCC_LAMBDA:-0.04}" \
              "--delay-compensation-form constant" ;;
    slr) echo "$SYNC --ps-mode async --staleness-lr on --async-momentum-correction off" ;;
    both) echo "$SYNC --ps-mode async --staleness-lr on --delay-compensation ${LAMBDA0:-2}" ;;
    slrm) echo "--optimizer sgd --lr 0.05 --momentum ${SLRM_MOMENTUM:-0.6} --ps-mode async --staleness-lr on" \
                "--async-momentum-correction off" ;;
    h*) echo "$INNER --local-steps ${1#h} $OUTER" ;;
    a*) echo "$INNER --ps-mode async --local-steps ${1#a} $OUTER" ;;
    s*) echo "$INNER --local-steps ${1#s} --fragments ${FRAGMENTS:-4} --fragment-delay ${DELAY:-1}" \
             "--fragment-mix ${MIX:-0.5} $OUTER" ;;
    *) echo "unknown mode $1 (sync, async, adef, dc, dcc, slr, both, slrm, hN, aN or sN)" >&2; exit 2 ;;
  esac
}

# kill_worker_after RUN_DIR STEP INDEX: once the chief's metrics.jsonl in
# RUN_DIR has logged STEP, kill -9 that run's worker INDEX; sets killed_at.
kill_worker_after() {
  while ! grep -qs "\"step\":$2," "$1/metrics.jsonl"; do sleep 0.02; done
  killed_at=$(date +%s.%N)
  pkill -KILL -f -- "--out $1 .*--job-name worker --task-index $3( |\$)"
}

seconds_since() { python3 -c "import time; print(f'{time.time() - $1:.2f}')"; }
