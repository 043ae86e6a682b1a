"""Horovod's process sets in tandem.torch, on every rank of a job (run under
tandem launch --workers N, N >= 3): the even ranks and the odd ranks each
form a set, every collective runs in each, with its gradients, and the
DistributedOptimizer averages among one set's ranks only. Every rank
computes what it expects from what every rank of its set sends."""
import time

import torch

import tandem.torch as hvd
from rank_checks import raises

hvd.init()
n, me = hvd.size(), hvd.rank()
assert n >= 3, "run with 3 or more workers"


def expect(a, b, what):
    assert a.dtype == b.dtype and torch.equal(a, b), f"rank {me}: {what}: got {a}, expected {b}"


# -- the sets: ids, ranks, what each rank sees of them ------------------------
assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.ranks == list(range(n))
assert hvd.global_process_set.size() == n and hvd.global_process_set.rank() == me
even_ranks, odd_ranks = list(range(0, n, 2)), list(range(1, n, 2))
even = hvd.add_process_set(reversed(even_ranks))  # any order: sorted
odd = hvd.add_process_set(hvd.ProcessSet(odd_ranks))
assert (even.process_set_id, odd.process_set_id) == (1, 2), (even, odd)
assert even.ranks == even_ranks and str(odd) == f"ProcessSet(process_set_id=2, ranks={odd_ranks}, mpi_comm=None)"
mine, other = (even, odd) if me % 2 == 0 else (odd, even)
assert mine.included() and not other.included()
assert mine.size() == len(mine.ranks) and other.size() == len(other.ranks)  # size() on any rank
assert mine.rank() == mine.ranks.index(me)
raises(ValueError, "not part of process set", other.rank)
raises(ValueError, "already has ranks", lambda: hvd.add_process_set(even_ranks))
raises(ValueError, "global process set", lambda: hvd.add_process_set(list(range(n))))
raises(ValueError, "outside the job's ranks", lambda: hvd.add_process_set([0, n]))
raises(ValueError, "twice", lambda: hvd.add_process_set([1, 1]))
raises(ValueError, "not a member of process set", lambda: hvd.allreduce(torch.ones(2), process_set=other))
raises(ValueError, "is not in process set", lambda: hvd.broadcast(torch.ones(2), other.ranks[0], process_set=mine))
size, rank = mine.size(), mine.rank()


def sent(r, dtype=torch.float64):
    """What rank `r` contributes: distinct per rank, exact in every dtype."""
    return (torch.arange(6) % 4 + r + 1).to(dtype).reshape(2, 3)


# -- allreduce, grouped, with gradients ----------------------------------------
for dtype in (torch.int16, torch.int32, torch.int64, torch.float32, torch.float64):
    total = sum(sent(r, torch.float64) for r in mine.ranks)
    expect(hvd.allreduce(sent(me, dtype), op=hvd.Sum, process_set=mine), total.to(dtype), f"allreduce {dtype}")
expect(hvd.allreduce(sent(me), process_set=mine), sum(sent(r) for r in mine.ranks) / size, "Average by set size")
got = hvd.grouped_allreduce([sent(me), sent(me) * 2], op=hvd.Sum, process_set=mine)
expect(got[1], 2 * sum(sent(r) for r in mine.ranks), "grouped_allreduce")
x = sent(me).requires_grad_()
hvd.allreduce(x, op=hvd.Sum, process_set=mine).sum().backward()
expect(x.grad, torch.full_like(x, size), "allreduce's gradient: the set's sum of ones")
parts = [sent(me).requires_grad_(), sent(me).requires_grad_()]
sum(t.sum() for t in hvd.grouped_allreduce(parts, op=hvd.Sum, process_set=mine)).backward()
expect(parts[0].grad, torch.full_like(parts[0], size), "grouped_allreduce's gradient")

# -- allgather: the set's rows in its rank order ------------------------------
rows = torch.full((me + 1, 2), float(me), requires_grad=True)
gathered = hvd.allgather(rows, process_set=mine)
expect(gathered.detach(), torch.cat([torch.full((r + 1, 2), float(r)) for r in mine.ranks]), "allgather")
(gathered * gathered.detach()).sum().backward()  # Horovod's: the set's mean of each rank's gradient rows
expect(rows.grad, torch.full_like(rows, float(me)), "allgather's gradient")
lists = hvd.allgather_object({"rank": me}, process_set=mine)
assert lists == [{"rank": r} for r in mine.ranks], lists

# -- broadcast: the root is the job's rank ------------------------------------
for root in mine.ranks:
    expect(hvd.broadcast(sent(me), root, process_set=mine), sent(root), f"broadcast from rank {root}")
    assert hvd.broadcast_object({"from": me}, root, process_set=mine) == {"from": root}
y = sent(me).requires_grad_()
hvd.broadcast(y, mine.ranks[0], process_set=mine).sum().backward()
expect(y.grad, torch.full_like(y, 1.0 if me == mine.ranks[0] else 0.0), "broadcast's gradient: the root's")

# -- alltoall: splits of the set's size ---------------------------------------
data = torch.cat([torch.full((me + 1, 2), float(receiver)) for receiver in mine.ranks])
out, received = hvd.alltoall(data, splits=[me + 1] * size, process_set=mine)
expect(out, torch.full((sum(r + 1 for r in mine.ranks), 2), float(me)), "alltoall: every row sent here")
expect(received, torch.tensor([r + 1 for r in mine.ranks], dtype=torch.int32), "alltoall's received splits")
z = torch.ones(size * 2, 3, requires_grad=True)
hvd.alltoall(z, process_set=mine).sum().backward()
expect(z.grad, torch.ones(size * 2, 3), "alltoall's gradient")

# -- reducescatter: this rank's share of the set's sum -------------------------
block = torch.arange(4 * size * 3, dtype=torch.float64).reshape(4 * size, 3)
share = hvd.reducescatter(block * (me + 1), op=hvd.Sum, process_set=mine)
expect(share, (block * sum(r + 1 for r in mine.ranks))[4 * rank:4 * rank + 4], "reducescatter")
w = block.clone().requires_grad_()
hvd.reducescatter(w, op=hvd.Sum, process_set=mine).sum().backward()
expect(w.grad, torch.full_like(w, float(size)), "reducescatter's gradient")

# -- sparse_allreduce_async: as the dense average over the set ----------------
dense = torch.zeros(5, 2)
dense[me % 5] = me + 1.0
sparse = hvd.sparse_allreduce_async(dense.to_sparse(), op=hvd.Average, process_set=mine)()
expect(sparse.to_dense(), hvd.allreduce(dense, process_set=mine), "sparse_allreduce_async")

# -- sets progress on their own: the first even rank keeps its set waiting ----
start = time.monotonic()
if me == 0:
    time.sleep(2)
hvd.barrier(process_set=mine)
waited = time.monotonic() - start
assert (waited >= 1.9) == (me % 2 == 0), f"rank {me} waited {waited:.2f}s at its set's barrier"
hvd.barrier()

# -- DistributedOptimizer(process_set=even): the odd ranks step alone ----------
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
start_state = {k: v.clone() for k, v in model.state_dict().items()}
start_weight = start_state["weight"]
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                               process_set=even)


def gradient_of(r):
    """Rank r's gradient of the weight for its own batch."""
    probe = torch.nn.Linear(3, 1)
    probe.load_state_dict(start_state)
    probe(torch.full((2, 3), r + 1.0)).sum().backward()
    return probe.weight.grad


model(torch.full((2, 3), me + 1.0)).sum().backward()
opt.step()
averaged = sum(gradient_of(r) for r in even_ranks) / len(even_ranks) if me % 2 == 0 else gradient_of(me)
assert torch.allclose(model.weight.detach(), start_weight - 0.1 * averaged, atol=1e-6), (me, model.weight)

# -- removing: ids come back, removed sets are refused -------------------------
assert hvd.remove_process_set(odd) and odd.process_set_id is None and odd.size() is None
assert not hvd.remove_process_set(odd) and not hvd.remove_process_set(hvd.global_process_set)
raises(ValueError, "has not been added", lambda: hvd.allreduce(torch.ones(1), process_set=odd))
again = hvd.add_process_set(odd_ranks)
assert again.process_set_id == 2, again  # the freed id, as Horovod reuses them
assert hvd.remove_process_set(again) and hvd.remove_process_set(even)

# -- init(process_sets=...): added in order at the next start -----------------
made = hvd.ProcessSet([0, 1])
hvd.shutdown()
hvd.init(process_sets=[made])
assert made.process_set_id == 1, made
raises(ValueError, "already has ranks", lambda: hvd.add_process_set([1, 0]))
if me in (0, 1):
    expect(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=made), torch.full((1,), 2.0), "a set from init()")
hvd.shutdown()
print(f"rank {me}: process sets as Horovod's")
