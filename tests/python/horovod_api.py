"""Each call of tandem.torch against Horovod's semantics, on every rank of a
job (run under tandem launch --workers N, N >= 2). Every rank computes the
expected result from what every rank sends, and asserts its own."""
import json
import os
import sys
import tempfile
import time
import warnings

import torch

import tandem.torch as hvd

hvd.init()
hvd.init()  # a second call is a no-op, as in Horovod
n, me = hvd.size(), hvd.rank()
assert n >= 2, "run with 2 or more workers"
assert hvd.local_size() == n and hvd.local_rank() == me, "one host: local ranks are the ranks"
assert hvd.cross_size() == 1 and hvd.cross_rank() == 0, "one host: one rank per local_rank"
assert hvd.gloo_built() and hvd.gloo_enabled() and not hvd.mpi_built() and not hvd.mpi_enabled()
assert not (hvd.nccl_built() or hvd.ccl_built() or hvd.ddl_built() or hvd.rocm_built() or hvd.cuda_built())


def sent(rank, dtype):
    """What rank `rank` contributes: distinct per rank, exact in every dtype."""
    return (torch.arange(6) % 4 + rank + 1).to(dtype).reshape(2, 3)


def expect(a, b, what, exact=True):
    ok = torch.equal(a, b) if exact else torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2)
    assert ok and a.dtype == b.dtype, f"rank {me}: {what}: got {a}, expected {b}"


# -- allreduce: every dtype and op; average=, prescale/postscale, compression
for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64):
    every = torch.stack([sent(r, dtype).double() for r in range(n)])
    floating = dtype.is_floating_point
    wanted = {hvd.Sum: every.sum(0), hvd.Min: every.min(0).values, hvd.Max: every.max(0).values,
              hvd.Product: every.prod(0),
              hvd.Average: every.sum(0) / n if floating else torch.div(every.sum(0), n, rounding_mode="trunc")}
    for op, value in wanted.items():
        got = hvd.allreduce(sent(me, dtype), op=op, name=f"t.{dtype}.{op}")
        expect(got, value.to(dtype), f"allreduce {dtype} op {op}", exact=not floating or dtype == torch.float64)
expect(hvd.allreduce(sent(me, torch.int64), average=False), sum(sent(r, torch.int64) for r in range(n)), "average=False")
try:
    hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)
    raise SystemExit("op and average together did not raise")
except ValueError as e:
    assert "supersedes average" in str(e), e
total = sum(sent(r, torch.float64) for r in range(n))
expect(hvd.allreduce(sent(me, torch.float64), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25), total * 0.5,
       "prescale 2, postscale 0.25")
# Integers scale as Horovod's ScaleBuffer does: the product in float64,
# truncated toward zero on the way back, on each rank before the sum and
# on the sum after it (Average's 1/size in the postscale).
for dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
    mine = torch.tensor([5, -5, 7, -7], dtype=dtype) * (me + 1)
    pre = sum(torch.trunc(torch.tensor([5.0, -5.0, 7.0, -7.0]) * (r + 1) * 0.5) for r in range(n))
    expect(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=0.75),
           torch.trunc(pre * 0.75).to(dtype), f"{dtype} prescale 0.5, postscale 0.75")
    expect(hvd.allreduce(mine, op=hvd.Average, prescale_factor=0.5), torch.trunc(pre / n).to(dtype),
           f"{dtype} average with prescale 0.5")
# int16 wraps as Horovod's does: its sum of 3 x 20000 is 60000 - 65536.
expect(hvd.allreduce(torch.tensor([20000], dtype=torch.int16), op=hvd.Sum),
       torch.tensor([20000 * n], dtype=torch.int64).to(torch.int16), "int16 sum wraps")
expect(hvd.allreduce(sent(me, torch.float32), compression=hvd.Compression.fp16), (total / n).float(),
       "fp16 compression", exact=False)
expect(hvd.allreduce(sent(me, torch.float32), compression=hvd.Compression.bf16), (total / n).float(),
       "bf16 compression", exact=False)
inplace = sent(me, torch.float64)
assert hvd.allreduce_(inplace, op=hvd.Sum) is inplace
expect(inplace, total, "allreduce_ in place")
strided = sent(me, torch.float64).t()  # not contiguous
hvd.allreduce_(strided, op=hvd.Sum)
expect(strided, total.t(), "allreduce_ of a transposed tensor")
handles = [hvd.allreduce_async(sent(me, torch.float64), op=hvd.Sum, name=f"async.{i}") for i in range(3)]
target = sent(me, torch.float64)
in_place = hvd.allreduce_async_(target, op=hvd.Max)
for h in handles:
    expect(hvd.synchronize(h), total, "allreduce_async")
hvd.synchronize(in_place)
assert hvd.poll(in_place)
expect(target, torch.stack([sent(r, torch.float64) for r in range(n)]).max(0).values, "allreduce_async_ in place")
x = sent(me, torch.float64).requires_grad_()
(hvd.allreduce(x, op=hvd.Average) * (me + 1)).sum().backward()
expect(x.grad, torch.full((2, 3), sum(r + 1 for r in range(n)) / n, dtype=torch.float64), "allreduce's gradient")

# -- grouped allreduce: one message, each tensor its reduction
group = [sent(me, torch.float64), sent(me, torch.float64)[0] * 3]
out = hvd.grouped_allreduce(group, op=hvd.Sum)
expect(out[0], total, "grouped_allreduce [0]")
expect(out[1], total[0] * 3, "grouped_allreduce [1]")
hvd.grouped_allreduce_(group, op=hvd.Sum)
expect(group[0], total, "grouped_allreduce_ in place")
expect(hvd.synchronize(hvd.grouped_allreduce_async([sent(me, torch.float64)], op=hvd.Sum))[0], total,
       "grouped_allreduce_async")
# Differentiable as allreduce is: each gradient is reduced by the same op.
a, b = sent(me, torch.float64).requires_grad_(), torch.ones(3, dtype=torch.float64, requires_grad=True)
ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Average)
(ra * (me + 1)).sum().backward(retain_graph=True)
(rb * 2 * (me + 1)).sum().backward()
mean_weight = sum(r + 1 for r in range(n)) / n
expect(a.grad, torch.full((2, 3), mean_weight, dtype=torch.float64), "grouped_allreduce's gradient [0]")
expect(b.grad, torch.full((3,), 2 * mean_weight, dtype=torch.float64), "grouped_allreduce's gradient [1]")

# -- allgather: uneven first dimension, rank order; objects
rows = torch.full((me + 1, 3), float(me))
gathered = hvd.allgather(rows)
expect(gathered, torch.cat([torch.full((r + 1, 3), float(r)) for r in range(n)]), "allgather, uneven rows")
expect(hvd.synchronize(hvd.allgather_async(torch.tensor([me]))), torch.arange(n), "allgather_async")
parts = hvd.synchronize(hvd.grouped_allgather_async([torch.tensor([me]), rows], name="parts"))
expect(parts[0], torch.arange(n), "grouped_allgather_async [0]")
expect(parts[1], gathered, "grouped_allgather_async [1]")
g = torch.full((me + 1, 2), 1.0, requires_grad=True)
(hvd.allgather(g) * 2).sum().backward()
expect(g.grad, torch.full((me + 1, 2), 2.0), "allgather's gradient: the mean over ranks of this rank's rows (Horovod's)")
assert hvd.allgather_object({"rank": me, "name": "x" * me}) == [{"rank": r, "name": "x" * r} for r in range(n)]

# -- sparse_allreduce_async: every rank's rows gathered (an embedding's gradient layout)
rows_touched = torch.tensor([[me, me + 1]])
sparse = torch.sparse_coo_tensor(rows_touched, torch.full((2, 3), float(me + 1)), (n + 1, 3))
dense_sum = sum(torch.sparse_coo_tensor(torch.tensor([[r, r + 1]]), torch.full((2, 3), float(r + 1)),
                                        (n + 1, 3)).to_dense() for r in range(n))
sparse_handle = hvd.sparse_allreduce_async(sparse, name="embedding.grad")
averaged = sparse_handle()  # callable, as Horovod's handle
assert averaged.is_sparse and averaged._nnz() == 2 * n, averaged
expect(averaged.to_dense(), dense_sum / n, "sparse_allreduce_async, Average", exact=False)
expect(hvd.synchronize(hvd.sparse_allreduce_async(sparse, op=hvd.Sum)).to_dense(), dense_sum,
       "sparse_allreduce_async, Sum")

# -- SparseAdam through DistributedOptimizer: an embedding's sparse gradients
# come back sparse, by rows; one step matches SparseAdam on the mean of
# every rank's gradient in one process.
def embedding():
    e = torch.nn.Embedding(n + 2, 2, sparse=True)
    torch.nn.init.constant_(e.weight, 1.0)
    return e


emb = embedding()
sopt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.1),
                                named_parameters=emb.named_parameters())
(emb(torch.tensor([me, me + 1])) * (me + 1)).sum().backward()
sopt.step()
ref = embedding()
for r in range(n):
    (ref(torch.tensor([r, r + 1])) * (r + 1)).sum().backward()
ref.weight.grad = ref.weight.grad / n
torch.optim.SparseAdam(ref.parameters(), lr=0.1).step()
expect(emb.weight.detach(), ref.weight.detach(), "SparseAdam through DistributedOptimizer", exact=False)

# -- broadcast: tensors, in place, objects, parameters, optimizer state
root = n - 1
for dtype in (torch.int16, torch.int32):
    expect(hvd.broadcast(sent(me, dtype), root_rank=root), sent(root, dtype), f"broadcast {dtype}")
expect(hvd.allgather(sent(me, torch.int16)), torch.cat([sent(r, torch.int16) for r in range(n)]), "allgather int16")
expect(hvd.alltoall(torch.full((n, 2), me, dtype=torch.int16)),
       torch.arange(n, dtype=torch.int16).unsqueeze(1).expand(n, 2), "alltoall int16")
b = sent(me, torch.bfloat16)
hvd.broadcast_(b, root)
expect(b, sent(root, torch.bfloat16), "broadcast_ in place")
expect(hvd.synchronize(hvd.broadcast_async(sent(me, torch.float64), 0)), sent(0, torch.float64), "broadcast_async")
assert hvd.broadcast_object({"from": me}, root_rank=root) == {"from": root}
model = torch.nn.Linear(3, 2)
torch.nn.init.constant_(model.weight, float(me))
hvd.broadcast_parameters(model.state_dict(), root_rank=root)
expect(model.weight.detach(), torch.full((2, 3), float(root)), "broadcast_parameters")
opt = torch.optim.Adam(model.parameters(), lr=0.1)
if me == root:  # only the root has state (as after loading a checkpoint)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
hvd.broadcast_optimizer_state(opt, root_rank=root)
assert len(opt.state) == 2, f"rank {me}: broadcast_optimizer_state left {len(opt.state)} states"
expect(opt.state[model.weight]["exp_avg"], torch.full((2, 3), 0.1), "broadcast Adam moment", exact=False)
# A fresh optimizer everywhere: as in Horovod, each rank first steps once
# on zero gradients, so the state exists (Adam's count 1) and decoupled
# weight decay shrinks every parameter once; also through a
# DistributedOptimizer, whose own step (a collective) is bypassed.
for wrap in (False, True):
    fresh = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(fresh.weight, 1.0)
    inner = torch.optim.AdamW(fresh.parameters(), lr=0.1, weight_decay=0.5)
    stepper = hvd.DistributedOptimizer(inner, named_parameters=fresh.named_parameters()) if wrap else inner
    hvd.broadcast_optimizer_state(stepper, root_rank=0)
    assert len(stepper.state) == 2 and int(stepper.state[fresh.weight]["step"]) == 1, f"rank {me}: {stepper.state}"
    expect(fresh.weight.detach(), torch.full((2, 3), 0.95), f"one decoupled decay (wrapped {wrap})", exact=False)
    expect(fresh.weight.grad, torch.zeros(2, 3), "the zero gradient it stepped on")
try:
    hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
    raise SystemExit("LBFGS did not raise")
except ValueError as e:
    assert "LBFGS" in str(e), e

# -- alltoall: splits[d] rows to rank d; received in rank order, with splits
splits = [d + 1 for d in range(n)]
send = torch.cat([torch.full((d + 1, 2), 100 * me + d) for d in range(n)])
received, received_splits = hvd.alltoall(send, splits=splits)
expect(received, torch.cat([torch.full((me + 1, 2), 100 * r + me) for r in range(n)]), "alltoall rows")
expect(received_splits, torch.full((n,), me + 1, dtype=torch.int32), "alltoall received splits")
even = hvd.alltoall(torch.arange(n) + 10 * me)  # without splits, Horovod returns the tensor alone
expect(even, torch.arange(n) * 10 + me, "alltoall, even splits")
# Differentiable: each received row's gradient goes back to its sender.
leaf = send.double().requires_grad_()
got, _ = hvd.alltoall(leaf, splits=splits)
(got * torch.arange(1, got.shape[0] + 1, dtype=torch.float64).unsqueeze(1)).sum().backward()
# Rank r weights the rows it received 1, 2, ...: my block for r, its rows me*(r+1)+1 on.
weights = torch.cat([torch.arange(1, n * (r + 1) + 1, dtype=torch.float64).view(n, r + 1)[me] for r in range(n)])
expect(leaf.grad, weights.unsqueeze(1).expand(-1, 2).contiguous(), "alltoall's gradient")

# -- reducescatter: this rank's share of the reduction
rs = hvd.reducescatter(torch.ones(n + 1, 2) * (me + 1), op=hvd.Sum)
expect(rs, torch.full((2 if me == 0 else 1, 2), float(sum(range(1, n + 1)))), "reducescatter")
owner = [0, 0] + list(range(1, n))  # n + 1 rows: rank 0 takes the extra one
mine = [i for i, r in enumerate(owner) if r == me]
base = torch.arange(2 * (n + 1), dtype=torch.float64).view(n + 1, 2)
average = (n * base + sum(range(n))) / n
expect(hvd.reducescatter(base + me, prescale_factor=3.0, postscale_factor=0.5), 1.5 * average[mine],
       "reducescatter, Average, prescale 3, postscale 0.5")
expect(hvd.synchronize(hvd.reducescatter_async(base + me, op=hvd.Sum, name="rs.async")), n * average[mine],
       "reducescatter_async")
first, second = hvd.grouped_reducescatter([base + me, 2 * (base + me)], op=hvd.Sum)
expect(first, n * average[mine], "grouped_reducescatter [0]")
expect(second, 2 * n * average[mine], "grouped_reducescatter [1]")
expect(hvd.synchronize(hvd.grouped_reducescatter_async([base + me]))[0], average[mine], "grouped_reducescatter_async")
# Horovod's gradient: the shares gathered back, times size() for Sum (not divided for Average).
for op, factor in ((hvd.Sum, n), (hvd.Average, 1)):
    leaf = (base + me).requires_grad_()
    (hvd.reducescatter(leaf, op=op, prescale_factor=2.0) * (me + 1)).sum().backward()
    wanted = torch.tensor([float(r + 1) for r in owner], dtype=torch.float64).unsqueeze(1).expand(-1, 2)
    expect(leaf.grad, wanted * factor * 2.0, f"reducescatter's gradient, op {op}")
for bad, says in ((lambda: hvd.reducescatter(torch.tensor(1.0)), "rank-zero tensor"),
                  (lambda: hvd.reducescatter(base, op=hvd.Max), "op must be Sum or Average"),
                  (lambda: hvd.reducescatter(base, op=hvd.Adasum), "op must be Sum or Average")):
    try:
        bad()
        raise SystemExit(f"reducescatter did not raise ({says})")
    except hvd.HorovodInternalError as e:
        assert says in str(e), e

hvd.barrier()

# -- mistakes: calls that differ across ranks, bad arguments on one rank.
# Ranks that disagree raise Horovod's HorovodInternalError, a RuntimeError
# (Tandem's MismatchError, a ValueError too, as it raised before).
for mismatched, says in ((lambda: hvd.allreduce(torch.ones(3 if me == 0 else 4)),
                          "rank 0 called allreduce (sum) of 3 float32 values, but rank(s) "),
                         (lambda: hvd.allreduce(torch.ones(3, dtype=torch.float32 if me == 0 else torch.float64)),
                          "rank 0 called allreduce (sum) of 3 float32 values, but rank(s) "),
                         (lambda: hvd.broadcast(torch.ones(3), root_rank=me), "rank(s) ")):
    try:
        mismatched()
        raise SystemExit(f"rank {me}: a mismatch did not raise ({says})")
    except RuntimeError as e:
        assert isinstance(e, hvd.HorovodInternalError) and isinstance(e, ValueError), type(e).__mro__
        assert says in str(e), e
# A named collective still running refuses a second of its name (ValueError,
# as Horovod's duplicate name). Rank 0 asks while the others have not
# started theirs, so the first cannot have finished; a file says when.
flag = hvd.broadcast_object(f"/tmp/tandem-horovod-api-{torch.randint(1 << 30, (1,)).item()}" if me == 0 else None)
if me == 0:
    first = hvd.allreduce_async(torch.ones(2), name="twice", op=hvd.Sum)
    try:
        hvd.allreduce_async(torch.ones(2), name="twice")
        raise SystemExit("a second collective named 'twice' while the first ran did not raise")
    except ValueError as e:
        assert not isinstance(e, RuntimeError) and "named 'twice' is still running" in str(e), e
    open(flag, "w").close()
else:
    while not os.path.exists(flag):
        time.sleep(0.01)
    first = hvd.allreduce_async(torch.ones(2), name="twice", op=hvd.Sum)
expect(hvd.synchronize(first), torch.full((2,), float(n)), "the first 'twice'")
expect(hvd.allreduce(torch.ones(2), name="twice", op=hvd.Sum), torch.full((2,), float(n)), "'twice' once synchronized")
hvd.barrier()
if me == 0:
    os.remove(flag)
try:
    hvd.alltoall(torch.ones(n, 2), splits=[n + 5] * n if me == 1 else None)
    raise SystemExit("bad splits did not raise")
except ValueError as e:
    wanted = "splits must be" if me == 1 else "rank(s) 1 refused their own arguments to alltoall"
    assert wanted in str(e), e
expect(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum), torch.tensor([float(n)]), "usable after the mistakes")

# -- DistributedOptimizer: an instance of the optimizer's own class
data = torch.arange(4 * n * 3, dtype=torch.float32).reshape(4 * n, 3) / 10


def run(steps=2, **kwargs):
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    dopt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                    **kwargs)
    assert isinstance(dopt, torch.optim.SGD)
    for _ in range(steps):
        dopt.zero_grad()
        net(data[me * 4:(me + 1) * 4]).pow(2).mean().backward()
        dopt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def single(steps=2, scale=1.0):
    """One process on the combined batch (the mean of the ranks' means)."""
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(steps):
        sgd.zero_grad()
        (sum(net(data[r * 4:(r + 1) * 4]).pow(2).mean() for r in range(n)) * scale / n).backward()
        sgd.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


base = single()
expect(run(), base, "Average == one process on the combined batch", exact=False)
assert torch.allclose(run(), base, rtol=1e-5, atol=1e-6)
assert torch.allclose(run(gradient_predivide_factor=2.0), base, rtol=1e-5, atol=1e-6), "predivide"
assert torch.allclose(run(op=hvd.Sum), single(scale=n), rtol=1e-5, atol=1e-6), "op=Sum"
fp16 = run(compression=hvd.Compression.fp16)
assert torch.allclose(fp16, base, rtol=1e-2, atol=1e-3) and not torch.equal(fp16, run()), "fp16: near, not equal"
assert torch.allclose(run(groups=3), base, rtol=1e-5, atol=1e-6), "groups=3"
for bad, message in (({"op": hvd.Min}, "Average, Sum or Adasum"), ({"groups": [[]]}, "groups as lists"),
                     ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, "op=Average only")):
    try:
        run(**bad)
        raise SystemExit(f"{bad} did not raise")
    except ValueError as e:
        assert message in str(e), e

# synchronize(), then clipping, then step() inside skip_synchronize(); zero_grad mid-exchange refused
torch.manual_seed(1)
net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
dopt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters())
net(data[me * 4:(me + 1) * 4]).pow(2).mean().backward()
try:
    dopt.zero_grad()
    raise SystemExit("zero_grad between backward and step did not raise")
except AssertionError as e:
    assert "before optimizer.step() or optimizer.synchronize()" in str(e), e
dopt.synchronize()
torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9)
with dopt.skip_synchronize():
    dopt.step()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dopt.zero_grad()
    net(data[me * 4:(me + 1) * 4]).pow(2).mean().backward()
    dopt.synchronize()
    dopt.step()
    assert any("skip_synchronize" in str(w.message) for w in caught), "no warning for a second synchronize"
expect(torch.cat([p.detach().reshape(-1) for p in net.parameters()]), base, "synchronize loop", exact=False)

# -- timeline: rank 0 writes one trace of the collectives, as Horovod's coordinator does
trace = os.path.join(tempfile.gettempdir(), f"tandem-timeline-{os.getppid()}.json")
hvd.start_timeline(trace)
hvd.allreduce(torch.ones(5), name="traced")
hvd.broadcast(torch.ones(2), root_rank=0)
hvd.stop_timeline()
hvd.stop_timeline()  # a second stop does nothing
hvd.barrier()
if me == 0:
    with open(trace) as f:
        names = [e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    assert "allreduce of 5 values" in names and any(x.startswith("broadcast") for x in names), names
    os.remove(trace)

# -- join: rank 0 has more data; joined ranks add zeros (Average divides by size)
if me == 0:
    expect(hvd.allreduce(torch.tensor([6.0]), op=hvd.Average), torch.tensor([6.0 / n]), "allreduce after joins")
    expect(hvd.allreduce(torch.tensor([5], dtype=torch.int32), op=hvd.Min), torch.tensor([5], dtype=torch.int32),
           "Min after joins: joined ranks send the identity")
    dopt.zero_grad()
    before = [p.detach().clone() for p in net.parameters()]
    net(data[:4]).pow(2).mean().backward()
    local = [p.grad.detach().clone() for p in net.parameters()]
    dopt.step()  # a DistributedOptimizer step, served by the joined ranks
    for p, b0, g0 in zip(net.parameters(), before, local):
        assert torch.allclose(p.detach(), b0 - 0.1 * g0 / n, rtol=1e-5, atol=1e-7), "step after joins"
last = hvd.join()
assert last == 0, f"rank {me}: join() says rank {last} joined last, not rank 0"
hvd.barrier()
# Horovod's own tests (test_horovod_join_allgather, _broadcast): with a rank
# joined, allgather and broadcast raise a RuntimeError on the others, who
# then join too; join() returns one rank everywhere, not the first joiner.
for first in range(n):
    for call in (lambda: hvd.allgather(torch.ones(2, 3)), lambda: hvd.broadcast(torch.ones(2, 3), me)):
        if me == first:
            last = hvd.join()
        else:
            try:
                call()
                raise SystemExit(f"rank {me}: a collective beside a joined rank did not raise")
            except RuntimeError:
                pass
            last = hvd.join()
        assert last != first, f"rank {me}: join() returned the first joiner {first}"
        assert hvd.allgather_object(last) == [last] * n, f"rank {me}: join() returned different ranks"

# -- elastic state: commit, restore, sync
state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=me)
state.epoch = 99
state.restore()
assert state.epoch == me
state.sync()
assert state.epoch == 0, f"rank {me}: sync() left epoch {state.epoch}"
assert not state.check_host_updates(), "a fixed job's members never change"


@hvd.elastic.run
def lose_a_peer(state):
    raise hvd.HorovodInternalError("a peer died")


try:
    lose_a_peer(state)
    raise AssertionError("hvd.elastic.run swallowed a dead peer in a job whose membership is fixed")
except hvd.HorovodInternalError as e:
    assert "start it with tandem launch --min-workers N" in str(e), str(e)


@hvd.elastic.run
def call_differently(state):
    hvd.allreduce(torch.ones(1 + me))


try:
    call_differently(state)
    raise AssertionError("ranks that called allreduce differently did not raise out of hvd.elastic.run")
except hvd.MismatchError as e:
    assert "membership is fixed" not in str(e), str(e)  # not taken for a dead peer, nor run again

# -- shutdown, then init again
hvd.shutdown()
assert not hvd.is_initialized()
hvd.init()
expect(hvd.allreduce(torch.tensor([float(me)]), op=hvd.Sum), torch.tensor([float(sum(range(n)))]), "after re-init")

# -- DistributedSampler from size() and rank(): disjoint shards that cover the data
sampler = torch.utils.data.distributed.DistributedSampler(range(10 * n + 1), num_replicas=hvd.size(),
                                                          rank=hvd.rank(), shuffle=True, seed=3)
mine = torch.tensor(list(sampler))
every = hvd.allgather(mine)
assert len(mine) == 11 and set(every.tolist()) == set(range(10 * n + 1)), f"rank {me}: shards {every.tolist()}"

# -- SyncBatchNorm: the global batch's statistics, forward and backward
torch.manual_seed(5)
batch = torch.randn(4 * n, 3, 5, 5)
reference = torch.nn.BatchNorm2d(3)
with torch.no_grad():
    reference.weight.uniform_()
    reference.bias.uniform_()
synced = hvd.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(reference)).train()
whole = batch.clone().requires_grad_()
(reference(whole) * torch.arange(4 * n).view(-1, 1, 1, 1)).sum().backward()
part = batch[me * 4:(me + 1) * 4].clone().requires_grad_()
(synced(part) * torch.arange(me * 4, (me + 1) * 4).view(-1, 1, 1, 1)).sum().backward()
assert torch.allclose(part.grad, whole.grad[me * 4:(me + 1) * 4], atol=1e-5), "SyncBatchNorm input gradient"
assert torch.allclose(synced[0].running_var, reference.running_var, atol=1e-5), "SyncBatchNorm running_var"
summed = hvd.allreduce(synced[0].weight.grad, op=hvd.Sum)
assert torch.allclose(summed, reference.weight.grad, atol=1e-4), "SyncBatchNorm weight gradient"
print(f"rank {me} of {n}: every call as Horovod's", file=sys.stderr)
