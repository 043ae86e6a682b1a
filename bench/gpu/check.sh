#!/usr/bin/env bash
# Issue 32's GPU check: one call on a lent GPU machine, about 5 minutes.
# Run bench/gpu/pack.sh here first; then, through the device tool:
#   run(command="bash bench/gpu/check.sh", carry=[".gpu"], timeout_s=480)
# It uses the image's torch (its LibTorch and CUDA libraries) and the
# carried binaries. Every line of the table says what was measured; PASS
# and FAIL lines say what was checked; the exit code is 1 if any failed.
# GPU=cpu dry-runs every step here, on the CPU (its GPU checks then fail).
set -uo pipefail
cd "$(dirname "$0")/../.."
GPU=${GPU:-cuda}
CPU_THREADS=${CPU_THREADS:-16}  # the machine's cores
R20_STEPS=${R20_STEPS:-300}
MLP_STEPS=${MLP_STEPS:-600}
ON=$([[ $GPU == cuda ]] && echo cuda:0 || echo "$GPU")
R=${WORK:-/tmp/gpu-check}  # the runs; $OUT gets the table and a tarball of logs and summaries
rm -rf "$R" && mkdir -p "$R"
TORCH_DIR=${TORCH_DIR:-$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')}
export LD_LIBRARY_PATH=$TORCH_DIR/lib:$PWD/.gpu/lib
T=$PWD/.gpu/bin/tandem
DATA=(--dataset fashion-mnist --data-dir "$PWD/.gpu/data")
MLP=(--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
     --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128)
FAILED=0
TABLE=$R/table.md
: > "$TABLE"
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
field() { python3 -c "import json,sys; print(json.load(open('$1/summary.json'))$2)" 2>/dev/null; }
train() {  # train NAME ARGS...: one run, its log and summary under $R/NAME
  local name=$1; shift
  local start=$SECONDS
  timeout 240 "$T" train --out "$R/$name" --overwrite --progress plain "$@" > "$R/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || { tail -5 "$R/$name.log"; fail "$name exited $rc"; }
  return $rc
}
rate() { printf '%.0f' "$(field "$R/$1" "['samples_per_sec']")"; }
phases() {  # a run's step breakdown in ms per step
  python3 -c "import json; b = json.load(open('$R/$1/summary.json'))['step_breakdown']; print(', '.join(f'{k} {v * 1e3:.2f}' for k, v in sorted(b.items()) if v))"
}

nvidia-smi -L
python3 -c 'import torch; print("image torch", torch.__version__, "cuda", torch.version.cuda)'
"$T" --version | tee "$R/version.txt"
grep -q "CUDA library loaded" "$R/version.txt" && pass "LibTorch's CUDA half loads" || fail "LibTorch's CUDA half did not load"

echo "== GPU unit tests"
.gpu/bin/tandem_gpu_tests 2>&1 | tee "$R/gpu_tests.log" | tail -4
if grep -q "^\[  PASSED  \]" "$R/gpu_tests.log" && ! grep -q "SKIPPED\|FAILED" "$R/gpu_tests.log"; then
  pass "GPU unit tests ran, none skipped"
else
  fail "GPU unit tests"
fi

echo "== cnn on Fashion-MNIST, one epoch, batch 64: CUDA against CPU ($CPU_THREADS threads)"
train cnn-cuda "${DATA[@]}" --model cnn --device "$GPU" --epochs 1 --log-every 100
train cnn-cpu "${DATA[@]}" --model cnn --device cpu --threads "$CPU_THREADS" --epochs 1 --log-every 100
for d in cuda cpu; do
  echo "| cnn, Fashion-MNIST, 1 epoch, batch 64 | $d | $(rate cnn-$d) samples/s | test accuracy $(field "$R/cnn-$d" "['test_accuracy']") |" >> "$TABLE"
done
[[ $(field "$R/cnn-cuda" "['device']") == "$ON" ]] && pass "--device cuda trains on cuda:0" || fail "cnn-cuda device"
python3 - "$R" <<'PY' && pass "cnn: CUDA reaches the CPU's accuracy (within 1.5 points) and its first logged loss (within 2%)" || fail "cnn CUDA against CPU"
import json, sys
r = sys.argv[1]
s = {d: json.load(open(f"{r}/cnn-{d}/summary.json")) for d in ("cuda", "cpu")}
first = {d: next(json.loads(l)["loss"] for l in open(f"{r}/cnn-{d}/metrics.jsonl") if '"train"' in l) for d in s}
print("accuracy", {d: s[d]["test_accuracy"] for d in s}, "first loss", first)
assert s["cuda"]["test_accuracy"] > 0.8
assert abs(s["cuda"]["test_accuracy"] - s["cpu"]["test_accuracy"]) < 0.015
assert abs(first["cuda"] - first["cpu"]) < 0.02 * first["cpu"]
PY

echo "== resnet20 on Fashion-MNIST, $R20_STEPS steps of batch 128"
train r20-cuda "${DATA[@]}" --model resnet20 --device "$GPU" --max-steps "$R20_STEPS" --batch-size 128 --log-every 50
train r20-cpu "${DATA[@]}" --model resnet20 --device cpu --threads "$CPU_THREADS" --max-steps "$R20_STEPS" --batch-size 128 --log-every 50
r20row() {  # r20row RUN LABEL
  echo "| resnet20, Fashion-MNIST, $R20_STEPS steps, batch 128 | $2 | $(rate "$1") samples/s | test accuracy $(field "$R/$1" "['test_accuracy']"); ms per step: $(phases "$1") |" >> "$TABLE"
}
r20row r20-cuda "$GPU"
r20row r20-cpu "cpu, $CPU_THREADS threads"

echo "== resnet20 on the GPU: mixed precision and channels-last"
for variant in "bf16:--amp bf16" "fp16:--amp fp16" "cl:--channels-last" "bf16-cl:--amp bf16 --channels-last"; do
  name=${variant%%:*}
  # shellcheck disable=SC2086  # the variant's flags split on purpose
  train "r20-$name" "${DATA[@]}" --model resnet20 --device "$GPU" --max-steps "$R20_STEPS" --batch-size 128 \
    --log-every 50 ${variant#*:} && r20row "r20-$name" "$GPU ${variant#*:}"
done
python3 - "$R" <<'PY' && pass "resnet20 in bf16, fp16 and channels-last reaches float32's accuracy within 3 points" ||
import json, sys
r = sys.argv[1]
base = json.load(open(f"{r}/r20-cuda/summary.json"))["test_accuracy"]
for name in ("bf16", "fp16", "cl", "bf16-cl"):
    s = json.load(open(f"{r}/r20-{name}/summary.json"))
    print(name, s["test_accuracy"], "float32", base, "amp", s["amp"])
    assert abs(s["test_accuracy"] - base) < 0.03, name
PY
  fail "resnet20 mixed precision accuracy"

echo "== MLP 256-4096-4096-256, Adam, batch 128: Tandem against PyTorch eager on this GPU"
train mlp-cuda "${MLP[@]}" --device "$GPU" --max-steps "$MLP_STEPS" --log-every 100
python3 bench/peer/report.py tandem-rate "$R/mlp-cuda" "$R/mlp-tandem.json" || fail "tandem rate"
python3 bench/peer/torch_bench.py standalone --device "$GPU" --warmup 100 --steps $((MLP_STEPS - 100)) --out "$R/mlp-torch.json" ||
  fail "PyTorch eager MLP"
python3 bench/peer/torch_bench.py standalone --device "$GPU" --fused --warmup 100 --steps $((MLP_STEPS - 100)) \
  --out "$R/mlp-torch-fused.json" || fail "PyTorch eager MLP, fused Adam"
python3 - "$R" "$TABLE" <<'PY' || fail "MLP table"
import json, sys
r, table = sys.argv[1:]
t = json.load(open(f"{r}/mlp-tandem.json")); p = json.load(open(f"{r}/mlp-torch.json"))
f = json.load(open(f"{r}/mlp-torch-fused.json"))
line = (f"| MLP 256-4096-4096-256, Adam, batch 128 | cuda | Tandem {t['updates_per_s']:.0f} updates/s; "
        f"PyTorch {p['torch_version']} eager {p['updates_per_s']:.0f}, with fused=True Adam {f['updates_per_s']:.0f} | "
        f"Tandem/PyTorch {t['updates_per_s'] / p['updates_per_s']:.2f}, against fused=True {t['updates_per_s'] / f['updates_per_s']:.2f} |")
print(line); open(table, "a").write(line + "\n")
PY

echo "== --device auto, and a run resumed on the GPU"
train auto "${DATA[@]}" --model cnn --device auto --max-steps 20 &&
  { [[ $(field "$R/auto" "['device']") == "$ON" ]] && pass "--device auto takes cuda:0" || fail "auto device"; }
train straight "${DATA[@]}" --model cnn --device "$GPU" --max-steps 200 --optimizer adam --lr 1e-3
train resumed "${DATA[@]}" --model cnn --device "$GPU" --max-steps 100 --optimizer adam --lr 1e-3
timeout 240 "$T" train --out "$R/resumed" --progress plain "${DATA[@]}" --model cnn --device "$GPU" --max-steps 200 \
  --optimizer adam --lr 1e-3 > "$R/resumed2.log" 2>&1 || fail "resume exited $?"
python3 - "$R" <<'PY' && pass "a GPU run resumed at step 100 ends where a straight one does (test loss within 1%)" || fail "resume on GPU"
import json, sys
r = sys.argv[1]
a = json.load(open(f"{r}/straight/summary.json")); b = json.load(open(f"{r}/resumed/summary.json"))
print("straight", a["test_loss"], a["test_accuracy"], "resumed", b["test_loss"], b["test_accuracy"], b["resumed_from"])
assert b["resumed_from"] and b["steps"] == 200
assert abs(a["test_loss"] - b["test_loss"]) < 0.01 * a["test_loss"]
PY

LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 train shared "${DATA[@]}" --model cnn --device "$GPU" --allow-shared-gpu --max-steps 20 &&
  { [[ $(field "$R/shared" "['device']") == "$ON" ]] && pass "local rank 1 of 2 shares cuda:0 with --allow-shared-gpu" ||
    fail "shared device"; }

echo "== --deterministic: the same seed twice gives the same bits on the GPU"
for run in det-a det-b; do
  train "$run" "${DATA[@]}" --model resnet20 --device "$GPU" --max-steps 100 --batch-size 128 --deterministic
done
python3 - "$R" <<'PY' && pass "resnet20 with --deterministic: two runs' final and test losses are equal to the bit" ||
import json, sys
r = sys.argv[1]
a, b = (json.load(open(f"{r}/{n}/summary.json")) for n in ("det-a", "det-b"))
print("det-a", a["final_loss"], a["test_loss"], "det-b", b["final_loss"], b["test_loss"], "deterministic", a["deterministic"])
assert a["deterministic"] and a["final_loss"] == b["final_loss"] and a["test_loss"] == b["test_loss"]
PY
  fail "deterministic resnet20 runs differ"
echo "| resnet20, Fashion-MNIST, 100 steps, batch 128, --deterministic | $GPU | $(rate det-a) samples/s | ms per step: $(phases det-a) |" >> "$TABLE"

echo "== bad input is named, exit code 2"
expect2() {  # expect2 NEEDLE ARGS...
  local needle=$1; shift
  timeout 120 "$T" "$@" > "$R/bad.log" 2>&1
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -q -- "$needle" "$R/bad.log"; then pass "exit 2 naming '$needle': $*"
  else fail "expected exit 2 naming '$needle' from: $* (rc $rc)"; tail -3 "$R/bad.log"; fi
}
expect2 "cuda:0 to cuda:0" train "${DATA[@]}" --device cuda:1 --max-steps 5 --out "$R/bad1" --overwrite
expect2 "none of its own" launch --workers 2 -- "${DATA[@]}" --device "$GPU" --max-steps 5 --out "$R/bad2" --overwrite
expect2 "--amp fp16 on the CPU" train "${DATA[@]}" --device cpu --amp fp16 --max-steps 5 --out "$R/bad4" --overwrite
expect2 "does not run on GPUs yet" launch --ps 1 --workers 1 -- "${DATA[@]}" --device "$GPU" --max-steps 5 \
  --out "$R/bad3" --overwrite

echo
echo "| workload | device | rate | notes |"
echo "|---|---|---|---|"
cat "$TABLE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "failed checks: $FAILED"
if [[ -n ${OUT:-} ]]; then
  cp "$TABLE" "$OUT/table.md"
  tar czf "$OUT/runs.tgz" -C "$R" --exclude='*.ckpt' --exclude='events.out*' .
fi
exit $((FAILED > 0))
