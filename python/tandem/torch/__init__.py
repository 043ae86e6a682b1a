"""Tandem for PyTorch, with Horovod's vocabulary: a Horovod script moves over
by changing ``import horovod.torch as hvd`` to ``import tandem.torch as hvd``.

    import tandem.torch as td
    td.init()
    td.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = td.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

Run it under ``tandem launch --workers N -- python3 train.py`` (or torchrun,
mpirun, srun). Gradients are averaged in buckets by the same C++ code as
``tandem train``, overlapped with backward.
"""
import torch

from tandem import _C

Average = "average"
Sum = "sum"

InputError = _C.InputError
PeerError = _C.PeerError


def init(rendezvous_timeout_s=60.0, peer_timeout_s=120.0, bucket_mb=25.0):
    """Joins the job (TF_CONFIG from tandem launch, or torchrun, mpirun, srun);
    alone when none is set."""
    _C.init(rendezvous_timeout_s, peer_timeout_s, bucket_mb)


def shutdown():
    _C.shutdown()


def is_initialized():
    return _C.is_initialized()


def rank():
    return _C.rank()


def size():
    return _C.size()


def local_rank():
    return _C.local_rank()


def local_size():
    return _C.local_size()


def allreduce(tensor, op=Average, name=None):
    """Returns the reduction of ``tensor`` over all ranks (a new tensor)."""
    if op not in (Average, Sum):
        raise ValueError(f"allreduce: op must be tandem.torch.Average or Sum, got {op!r}")
    if tensor.dtype != torch.float32:
        raise ValueError(f"allreduce: float32 tensors only, got {tensor.dtype}")
    out = tensor.detach().clone()
    _C.allreduce_(out, op == Average)
    return out


def allreduce_(tensor, op=Average, name=None):
    """Reduces ``tensor`` in place over all ranks and returns it."""
    with torch.no_grad():
        tensor.copy_(allreduce(tensor, op))
    return tensor


def broadcast_parameters(params, root_rank=0):
    """Copies ``params`` (a state_dict, or (name, tensor) pairs) from root_rank to every rank, in place."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    tensors = [t for _, t in items if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        _C.broadcast_([t.data for t in tensors], root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Copies the optimizer's numeric hyper-parameters (lr, momentum, ...) and
    tensor state (momentum buffers, Adam moments) from root_rank to every
    rank. Every rank's state must have the same structure (e.g. all after
    loading the same checkpoint, or all before the first step)."""
    keys = [(i, k) for i, g in enumerate(optimizer.param_groups) for k in sorted(g)
            if isinstance(g[k], (int, float)) and not isinstance(g[k], bool)]
    values = torch.tensor([float(optimizer.param_groups[i][k]) for i, k in keys], dtype=torch.float64)
    state = optimizer.state_dict()["state"]
    tensors = [state[p][n] for p in sorted(state) for n in sorted(state[p]) if isinstance(state[p][n], torch.Tensor)]
    count = torch.tensor([float(len(tensors))])
    if allreduce(count, op=Sum).item() != len(tensors) * size():
        raise ValueError("broadcast_optimizer_state: ranks hold optimizer state of different structure (one has "
                         "stepped or loaded a checkpoint, another not); call it where all ranks agree")
    _C.broadcast_([values] + tensors, root_rank)
    for (i, k), v in zip(keys, values.tolist()):
        optimizer.param_groups[i][k] = type(optimizer.param_groups[i][k])(v)


_MODES = ("allreduce", "ps-sync", "ps-async", "ssp")


class DistributedOptimizer:
    """Wraps a torch.optim optimizer: ``step()`` waits for the gradients
    averaged over all ranks (reduced from backward hooks, overlapped with the
    rest of backward), then steps the wrapped optimizer."""

    def __init__(self, optimizer, named_parameters=None, mode="allreduce", staleness=None,
                 backward_passes_per_step=1):
        if mode not in _MODES:
            raise ValueError(f"DistributedOptimizer: mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if mode != "allreduce":
            raise NotImplementedError(
                f"DistributedOptimizer: mode {mode!r} (the parameter servers) is not in the Python package yet; "
                "use mode='allreduce', or `tandem train` for parameter-server training")
        if backward_passes_per_step != 1:
            raise NotImplementedError("DistributedOptimizer: backward_passes_per_step > 1 is not supported yet")
        if named_parameters is None:
            named_parameters = [(f"param.{i}", p) for g in optimizer.param_groups for i, p in enumerate(g["params"])]
        named = [(n, p) for n, p in named_parameters if p.requires_grad]
        ours = {id(p) for _, p in named}
        theirs = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if ours != theirs:
            raise ValueError("DistributedOptimizer: named_parameters and the optimizer's parameters differ")
        self._optimizer = optimizer
        self._averager = _C.GradientAverager(named)

    @property
    def param_groups(self):
        return self._optimizer.param_groups

    def state_dict(self):
        return self._optimizer.state_dict()

    def load_state_dict(self, state):
        self._optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none=True):
        """Unsets every gradient: a reduced gradient must not be added into."""
        self._averager.zero_grad()

    def synchronize(self):
        """Waits until every .grad holds the mean over all ranks."""
        self._averager.synchronize()

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("DistributedOptimizer.step: closures are not supported")
        self._averager.synchronize()
        result = self._optimizer.step()
        self._averager.zero_grad()
        return result
