"""Horovod's Adasum in tandem.torch, on every rank of a job (run under
tandem launch --workers N): with a power-of-2 N, orthogonal gradients add,
parallel ones average, any others combine up a binary tree in rank order,
tensor by tensor; DistributedOptimizer(op=Adasum) combines the ranks'
changes. With another N both refuse, as Horovod does."""
import torch

import tandem.torch as hvd
from rank_checks import raises

hvd.init()
n, me = hvd.size(), hvd.rank()


if n & (n - 1):
    raises(NotImplementedError, "non-power of 2", lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum))
    model = torch.nn.Linear(3, 1)
    raises(NotImplementedError, "non-power of 2",
           lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum))
    hvd.shutdown()
    print(f"rank {me}: Adasum refused on {n} ranks, as Horovod refuses it")
    raise SystemExit(0)


def pair(a, b):
    """Adasum of two vectors, from its definition (float64)."""
    dot = torch.dot(a, b)
    return (1 - dot / (2 * torch.dot(a, a))) * a + (1 - dot / (2 * torch.dot(b, b))) * b


def tree(vectors):
    while len(vectors) > 1:
        vectors = [pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def close(a, b, what, tol=1e-6):
    assert a.dtype == b.dtype and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), \
        f"rank {me}: {what}: got {a}, expected {b}"


def every(make):
    """What each rank sends, as every rank can compute it."""
    return [make(r) for r in range(n)]


# -- orthogonal gradients add; parallel ones average ---------------------------
axis = torch.zeros(n, dtype=torch.float64)
axis[me] = me + 1.0
close(hvd.allreduce(axis, op=hvd.Adasum), torch.arange(1.0, n + 1, dtype=torch.float64), "orthogonal: the sum")
v = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
close(hvd.allreduce(v * (me + 1), op=hvd.Adasum), v * (n + 1) / 2, "parallel: the mean")


# -- any gradients: the tree in rank order, per tensor, every float dtype ------
def random_of(r, shape=(4, 3), seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed * 100 + r), dtype=torch.float64)


for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.float16, 2e-2)):
    got = hvd.allreduce(random_of(me).to(dtype), op=hvd.Adasum, name=f"adasum.{dtype}")
    close(got, tree([t.reshape(-1) for t in every(random_of)]).reshape(4, 3).to(dtype), f"tree in {dtype}", tol)
first, second = hvd.grouped_allreduce([random_of(me), random_of(me, (5,), 1) * 10], op=hvd.Adasum)
close(first, tree([t.reshape(-1) for t in every(random_of)]).reshape(4, 3), "grouped: first tensor's own coefficients")
close(second, tree(every(lambda r: random_of(r, (5,), 1) * 10)), "grouped: second tensor's own coefficients")
close(hvd.allreduce(v * (me + 1), op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.5), v * (n + 1) / 2,
      "prescale and postscale")
in_place = random_of(me)
hvd.synchronize(hvd.allreduce_async_(in_place, op=hvd.Adasum))
close(in_place, tree([t.reshape(-1) for t in every(random_of)]).reshape(4, 3), "allreduce_async_ in place")
g = (v * (me + 1)).requires_grad_()
hvd.allreduce(g, op=hvd.Adasum).backward(v)  # every rank's gradient is v: parallel, so v comes back
close(g.grad, v, "Adasum's gradient: the Adasum of the gradients")
raises(hvd.HorovodInternalError, "float16, float32 and float64", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32),
                                                                                     op=hvd.Adasum))
solo = hvd.add_process_set([0])
raises(NotImplementedError, "non-global process sets", lambda: hvd.allreduce(v, op=hvd.Adasum, process_set=solo))
hvd.remove_process_set(solo)

# -- DistributedOptimizer(op=Adasum): the ranks' changes combined -------------
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
before = {k: t.clone() for k, t in model.state_dict().items()}
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), op=hvd.Adasum)
assert isinstance(opt, torch.optim.SGD)


def change_of(r):
    """Rank r's own SGD change for its batch, parameter by parameter."""
    probe = torch.nn.Linear(3, 2)
    probe.load_state_dict(before)
    (probe(torch.full((2, 3), r + 1.0)) * torch.tensor([1.0, -1.0 - r])).sum().backward()
    return {"weight": -0.1 * probe.weight.grad, "bias": -0.1 * probe.bias.grad}


(model(torch.full((2, 3), me + 1.0)) * torch.tensor([1.0, -1.0 - me])).sum().backward()
raises(AssertionError, "zero_grad", opt.zero_grad)
raises(AssertionError, "Skipping synchronization", lambda: opt.skip_synchronize().__enter__())
opt.step()
changes = every(change_of)
for name, param in model.named_parameters():
    combined = tree([c[name].double().reshape(-1) for c in changes]).reshape(param.shape).float()
    close(param.detach(), before[name] + combined, f"DistributedOptimizer(op=Adasum) {name}", 1e-5)
opt.zero_grad()
hvd.shutdown()
print(f"rank {me}: Adasum as Horovod's")
