#!/usr/bin/env bash
# The Python package under `tandem launch`, as a Horovod user would run it,
# in three parts that ctest runs side by side (PART):
#   allreduce: 2 workers end with the parameters of one process on the
#     combined batch (also with 2 backward passes per step, and near it with
#     bf16 on the wire), under torchrun as under tandem launch; one tandem
#     process equals a plain PyTorch loop; tandem.torch and
#     torch.distributed (gloo) share a process;
#   ps: 1 PS-sync worker equals plain PyTorch's Adam under an LR scheduler,
#     2 PS x 2 workers equal one process (fp16 on the wire: near it), async
#     and SSP workers learn;
#   errors: mistakes are Python exceptions naming the culprit, and the
#     shipped example learns.
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
# The Python whose torch this build links (the venv's, from CMake).
PY=$3
PART=$4
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
SCRIPT="$SOURCE_DIR/tests/python/train_mlp.py"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Compares the saved parameters of the runs under $WORK as PART asks.
check() {
  "$PY" - "$WORK" "$PART" <<'PY'
import re
import sys
import torch
work, part = sys.argv[1], sys.argv[2]


def load(run, rank=0):
    return torch.load(f"{work}/{run}/rank{rank}.pt")


def relative(a, b):
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


plain = load("plain")
if part == "allreduce":
    r0, r1, one = load("two", 0), load("two", 1), load("one")
    t0, t1 = load("torchrun", 0), load("torchrun", 1)
    for name in r0:
        assert torch.equal(r0[name], r1[name]), f"{name}: the two workers' replicas differ"
        assert torch.equal(t0[name], r0[name]) and torch.equal(t1[name], r0[name]), f"{name}: torchrun differs from launch"
        rel = ((r0[name] - one[name]).norm() / one[name].norm()).item()
        assert rel < 1e-5, f"{name}: 2 workers vs one process on the combined batch: relative difference {rel:.2e}"
        assert torch.equal(one[name], plain[name]), f"{name}: one tandem process differs from plain PyTorch"
    print("equal: 2 workers ~ 1 process (1e-5), under torchrun == under tandem launch, 1 process == plain PyTorch")
    exact, near = ("two-passes",), ("two-bf16",)
else:
    rel = relative(load("ps-adam"), load("plain-adam"))
    assert rel < 1e-6, f"1 PS-sync worker vs a plain PyTorch Adam loop: relative difference {rel:.2e}"
    rel = relative(load("diloco-one"), load("plain-adam"))
    assert rel < 1e-5, f"1 DiLoCo worker, outer SGD at 1, vs a plain PyTorch Adam loop: relative difference {rel:.2e}"
    d0, d1 = load("diloco-two", 0), load("diloco-two", 1)
    for name in d0:
        assert torch.equal(d0[name], d1[name]), f"{name}: sync DiLoCo workers left the last round apart"
    assert relative(d0, plain) > 1e-3, "2 DiLoCo workers ended where one process did: nothing was local"
    # 4-bit pushes with error feedback: one global model still, near float32's.
    q0, q1 = load("diloco-int4", 0), load("diloco-int4", 1)
    for name in q0:
        assert torch.equal(q0[name], q1[name]), f"{name}: 4-bit DiLoCo workers left the last round apart"
    rel = relative(q0, d0)
    assert 0 < rel < 5e-2, f"4-bit pushes vs float32 DiLoCo: relative difference {rel:.2e}"
    print(f"equal: 1 DiLoCo worker ~ plain Adam (1e-5); 2 sync DiLoCo workers end on one global model; "
          f"4-bit pushes end {rel:.1e} from float32's")
    for mode in ("ps-async", "ps-ssp"):
        log = open(f"{work}/{mode}.log").read()
        losses = [float(v) for v in re.findall(r"\[worker 0\] step \d+ loss ([0-9.]+)", log)]
        assert len(losses) == 5 and losses[-1] < 0.5 * losses[0], f"{mode}: worker 0's loss did not fall: {losses}"
    print("equal: 1 PS-sync worker ~ plain Adam (1e-6); async and SSP learn")
    exact, near = ("ps-two",), ("ps-fp16",)
for run in exact:
    for r in (0, 1):
        rel = relative(load(run, r), plain)
        assert rel < 1e-5, f"{run} rank {r} vs one process on the combined batch: relative difference {rel:.2e}"
# 16 bits on the wire: near, not equal, to float32 on the combined batch.
for run in near:
    for r in (0, 1):
        rel = relative(load(run, r), plain)
        assert 0 < rel < 2e-2, f"{run} rank {r} vs one float32 process: relative difference {rel:.2e}"
print(f"equal: {', '.join(exact)} ~ 1 process (1e-5); near: {', '.join(near)} (within 2e-2, not equal)")
PY
}

case "$PART" in
allreduce)
  "$PY" "$SCRIPT" --out "$WORK/plain" --plain
  "$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/two"
  # torchrun from the same venv starts the script itself (no tandem launch).
  "$(dirname "$PY")/torchrun" --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
    "$SCRIPT" --out "$WORK/torchrun" > "$WORK/torchrun.log" 2>&1 || { echo "FAIL: torchrun"; cat "$WORK/torchrun.log"; exit 1; }
  # One Gloo: tandem.torch beside torch.distributed's gloo backend, one process a worker.
  "$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SOURCE_DIR/tests/python/one_gloo.py" "$WORK"
  "$PY" "$SCRIPT" --out "$WORK/one"
  "$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/two-passes" --passes 2
  "$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/two-bf16" --wire-dtype bf16
  check
  ;;
ps)
  "$PY" "$SCRIPT" --out "$WORK/plain" --plain
  "$BUILD_DIR/tandem" launch --ps 1 --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/ps-fp16" --mode ps-sync --wire-dtype fp16
  "$BUILD_DIR/tandem" launch --ps 2 --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/ps-two" --mode ps-sync --passes 2
  "$BUILD_DIR/tandem" launch --ps 1 --workers 1 -- "$PY" "$SCRIPT" --out "$WORK/ps-adam" --mode ps-sync \
    --optimizer adam --lr-drop 10
  "$PY" "$SCRIPT" --out "$WORK/plain-adam" --plain --optimizer adam --lr-drop 10
  # DiLoCo: Adam steps in Python, 3 a round (20 steps: a partial last one);
  # outer SGD at rate 1 makes each round's global model the worker's own.
  "$BUILD_DIR/tandem" launch --ps 1 --workers 1 -- "$PY" "$SCRIPT" --out "$WORK/diloco-one" --mode ps-sync \
    --optimizer adam --lr-drop 10 --local-steps 3 --outer sgd,1,0
  "$BUILD_DIR/tandem" launch --ps 1 --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/diloco-two" --mode ps-sync \
    --local-steps 4 --steps 22
  "$BUILD_DIR/tandem" launch --ps 1 --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/diloco-int4" --mode ps-sync \
    --local-steps 4 --steps 22 --push-bits 4
  for mode in ps-async ps-ssp; do
    "$BUILD_DIR/tandem" launch --ps 1 --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/$mode" --mode $mode --steps 40 \
      > "$WORK/$mode.log" 2>&1 || { echo "FAIL: $mode"; cat "$WORK/$mode.log"; exit 1; }
  done
  check
  ;;
errors)
# Mistakes are exceptions that name the culprit.
"$PY" - <<'PY'
import inspect
import tandem.torch as td
import torch
from tandem import _C
# Every default the Python faces share with `tandem train`, keyword by keyword,
# against the extension's copy of the one declaration, and in the docstrings.
declared = {o["keyword"]: o for o in _C.options()}
# None defaults mean "not given": local_steps (off), staleness (ps-ssp's
# own) and bucket_mb (init()'s); `optimizer` is the wrapped one, not a name.
for fn in (td.init, td.DistributedOptimizer):
    shared = [p for p in inspect.signature(fn).parameters.values() if p.name in declared and p.name != "optimizer"]
    assert len(shared) >= 6, [p.name for p in shared]
    for p in shared:
        if p.default is None and p.name in ("local_steps", "staleness", "bucket_mb"):
            continue
        assert p.default == declared[p.name]["default"], (fn.__name__, p.name, p.default, declared[p.name]["default"])
        assert f"``{p.name}`` ({declared[p.name]['flag']}" in fn.__doc__, (fn.__name__, p.name)
assert declared["ps_chunk_mb"]["default"] == 0, declared["ps_chunk_mb"]
try:
    td.rank()
    raise SystemExit("rank() before init() did not raise")
except RuntimeError as e:
    assert "init()" in str(e), e
# init()'s settings are typed in C++: a bad name is refused before anything joins.
for kwargs, says in (({"wire_dtype": "fp64"}, "tandem.torch.init: wire_dtype fp64: expected fp32, fp16 or bf16"),
                     ({"hierarchical": "maybe"}, "tandem.torch.init: hierarchical: expected auto or off, got 'maybe'")):
    try:
        td.init(**kwargs)
        raise SystemExit(f"init({kwargs}) did not raise")
    except ValueError as e:
        assert says in str(e), e
    assert not td.is_initialized()
td.init()
def refused(says, **kwargs):
    try:
        td.DistributedOptimizer(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), **kwargs)
        raise SystemExit(f"{kwargs} did not raise")
    except ValueError as e:
        assert says in str(e), e
refused("DistributedOptimizer: local_steps: expected an integer, got true", local_steps=True)
# Checked for the mode asked: DC-ASGD corrects stale gradients, which sync never has.
refused("DistributedOptimizer: delay_compensation: needs ps_mode async", mode="ps-sync", delay_compensation=2.0)
refused("delay_compensation applies to the ps modes", delay_compensation=2.0)
refused("needs parameter servers", mode="ps-async", delay_compensation=2.0)  # its check passed
w = torch.zeros(2, requires_grad=True)
try:
    td.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), mode="ps-async")
    raise SystemExit("ps-async without servers did not raise")
except ValueError as e:
    assert "needs parameter servers" in str(e), e
try:
    td.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), local_steps=5)
    raise SystemExit("local_steps with all-reduce did not raise")
except ValueError as e:
    assert "local_steps (DiLoCo) applies to mode='ps-sync' or 'ps-async'" in str(e), e
for bits, mode, says in ((3, "ps-sync", "push_bits 3: expected 8 or 4"),
                         (8, "allreduce", "push_bits applies to the ps modes")):
    try:
        td.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), push_bits=bits, mode=mode)
        raise SystemExit(f"push_bits={bits} with all-reduce did not raise")
    except ValueError as e:
        assert says in str(e), e
try:
    td.DistributedOptimizer(torch.optim.Adagrad([w], lr=0.1), mode="ps-sync")
    raise SystemExit("Adagrad on the servers did not raise")
except ValueError as e:
    assert "not Adagrad" in str(e), e
opt = td.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), named_parameters=[("w", w)], backward_passes_per_step=2)
opt.zero_grad()
(w * 2).sum().backward()
try:
    opt.step()
    raise SystemExit("a step after 1 of 2 backward passes did not raise")
except ValueError as e:
    assert "1 backward pass(es) since the last step" in str(e), e
(w * 2).sum().backward()
try:
    (w * 2).sum().backward()
    raise SystemExit("a third backward pass did not raise")
except (RuntimeError, ValueError) as e:
    assert "backward pass 3 before step(), but backward_passes_per_step is 2" in str(e), e
try:
    td.allreduce(torch.zeros(3, dtype=torch.bool))
    raise SystemExit("a bool allreduce did not raise")
except ValueError as e:
    assert "Bool tensors are not supported" in str(e), e
print("errors: named")
PY
if out=$("$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SCRIPT" --out "$WORK/bad" --bad-rank 1 2>&1); then
  echo "FAIL: different models on the ranks were accepted"; echo "$out"; exit 1
fi
grep -q "rank(s) 1 have tensor counts, dtypes or shapes different from rank 0's" <<< "$out" || { echo "FAIL: $out"; exit 1; }
# The shipped example, on Debian's Fashion-MNIST, a short run.
if [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  mnist=$("$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$SOURCE_DIR/examples/python/mnist.py" --max-steps 150 2>&1) \
    || { echo "FAIL: examples/python/mnist.py"; echo "$mnist"; exit 1; }
  echo "$mnist" | tail -n 3
  "$PY" - "$mnist" <<'PY'
import re, sys
accuracy = float(re.search(r"test accuracy ([0-9.]+)", sys.argv[1]).group(1))
assert accuracy > 0.7, f"examples/python/mnist.py reached only {accuracy} after 150 steps (chance is 0.1)"
PY
fi
;;
*)
  echo "python_package_test.sh: PART must be allreduce, ps or errors, got '$PART'" >&2
  exit 2
  ;;
esac
echo "PASS"
