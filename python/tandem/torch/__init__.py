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
``tandem train``, overlapped with backward. With ``mode="ps-sync"``,
``"ps-async"`` or ``"ssp"`` and ``tandem launch --ps K``, parameter servers
run the optimizer instead.
"""
import atexit
import weakref

import torch

from tandem import _build

if torch.__version__.split("+")[0] != _build.torch_version:
    raise ImportError(f"tandem was built against torch {_build.torch_version}, but this Python has torch "
                      f"{torch.__version__}: reinstall tandem in this environment (pip install "
                      f"--force-reinstall --no-deps /path/to/tandem)")

from tandem import _C  # noqa: E402  (after the version check: a mismatched LibTorch fails to load it)

Average = "average"
Sum = "sum"

InputError = _C.InputError
PeerError = _C.PeerError


def init(rendezvous_timeout_s=60.0, peer_timeout_s=120.0, bucket_mb=0.0, wire_dtype="fp32", error_feedback=False,
         hierarchical="auto"):
    """Joins the job (TF_CONFIG from tandem launch, or torchrun, mpirun, srun);
    alone when none is set. bucket_mb 0 sizes DistributedOptimizer's gradient
    buckets from the model. wire_dtype "fp16" or "bf16" sends its gradients
    in 16 bits (weights and optimizer state stay float32); error_feedback
    carries each value's rounding into its next send. hierarchical "auto"
    sums each host's workers over loopback first when the job spans hosts."""
    _C.init(rendezvous_timeout_s, peer_timeout_s, bucket_mb, wire_dtype, error_feedback, hierarchical)


def shutdown():
    _finish_servers()
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
_live_servers = weakref.WeakSet()  # PS-mode optimizers to finish at shutdown


def _server_settings(optimizer):
    """What the parameter servers run for a torch.optim optimizer, read from
    its first parameter group (every group must agree)."""
    kinds = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
             torch.optim.RMSprop: "rmsprop"}
    name = kinds.get(type(optimizer))
    if name is None:
        raise ValueError(f"DistributedOptimizer: the parameter servers run torch.optim.SGD, Adam, AdamW or RMSprop, "
                         f"not {type(optimizer).__name__}; use mode='allreduce' for other optimizers")
    g = optimizer.param_groups[0]
    for i, other in enumerate(optimizer.param_groups[1:], 1):
        if {k: v for k, v in other.items() if k != "params"} != {k: v for k, v in g.items() if k != "params"}:
            raise ValueError(f"DistributedOptimizer: parameter group {i} has options other than group 0's; the "
                             "parameter servers run one optimizer over every parameter")
    if g.get("maximize", False):
        raise ValueError("DistributedOptimizer: the parameter servers do not run maximize=True")
    if name == "sgd" and g.get("dampening", 0) != 0:
        raise ValueError("DistributedOptimizer: the parameter servers run SGD without dampening")
    if name in ("adam", "adamw") and g.get("amsgrad", False):
        raise ValueError(f"DistributedOptimizer: the parameter servers run {name} without amsgrad")
    betas = g.get("betas", (0.9, 0.999))
    return {"name": name, "lr": float(g["lr"]), "momentum": float(g.get("momentum", 0.0)),
            "nesterov": bool(g.get("nesterov", False)), "weight_decay": float(g.get("weight_decay", 0.0)),
            "beta1": float(betas[0]), "beta2": float(betas[1]), "eps": float(g.get("eps", 1e-8)),
            "alpha": float(g.get("alpha", 0.99)), "centered": bool(g.get("centered", False))}


class DistributedOptimizer:
    """Wraps a torch.optim optimizer.

    mode="allreduce": ``step()`` waits for the gradients averaged over all
    ranks (reduced from backward hooks, overlapped with the rest of
    backward), then steps the wrapped optimizer.

    mode="ps-sync", "ps-async" or "ssp" (run under ``tandem launch --ps K``):
    each chunk of gradients is pushed to its parameter server from backward
    hooks; the servers run the optimizer (SGD, Adam, AdamW or RMSprop with
    the wrapped optimizer's settings, at the learning rate its first group
    holds at each ``zero_grad()`` and ``step()``, so LR schedulers work), and
    ``step()`` installs the parameters pulled back. The chief's parameters
    initialise the servers. The wrapped optimizer's own state is not used.

    ``backward_passes_per_step`` backward passes add up before each
    ``step()``, as in Horovod (divide the loss by it for their mean).
    """

    def __init__(self, optimizer, named_parameters=None, mode="allreduce", staleness=None,
                 backward_passes_per_step=1, ps_chunk_mb=4.0):
        if mode not in _MODES:
            raise ValueError(f"DistributedOptimizer: mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if staleness is not None and mode != "ssp":
            raise ValueError(f"DistributedOptimizer: staleness applies to mode='ssp', not {mode!r}")
        if named_parameters is None:
            named_parameters = [(f"param.{i}", p) for g in optimizer.param_groups for i, p in enumerate(g["params"])]
        named = [(n, p) for n, p in named_parameters if p.requires_grad]
        ours = {id(p) for _, p in named}
        theirs = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if ours != theirs:
            raise ValueError("DistributedOptimizer: named_parameters and the optimizer's parameters differ")
        self._optimizer = optimizer
        self._averager = None
        self._servers = None
        if mode == "allreduce":
            self._averager = _C.GradientAverager(named, backward_passes_per_step)
        else:
            self._servers = _C.PsOptimizer(named, mode, 1 if staleness is None else staleness,
                                           backward_passes_per_step, ps_chunk_mb, _server_settings(optimizer))
            _live_servers.add(self)

    @property
    def param_groups(self):
        return self._optimizer.param_groups

    def state_dict(self):
        return self._optimizer.state_dict()

    def load_state_dict(self, state):
        self._optimizer.load_state_dict(state)

    def _send_lr(self):
        self._servers.set_lr(float(self._optimizer.param_groups[0]["lr"]))

    def zero_grad(self, set_to_none=True):
        """Unsets every gradient: a reduced gradient must not be added into."""
        if self._servers is not None:
            self._send_lr()  # a scheduler's new rate applies from this update on
            self._servers.zero_grad()
        else:
            self._averager.zero_grad()

    def synchronize(self):
        """All-reduce mode: waits until every .grad holds the mean over all ranks."""
        if self._averager is None:
            raise ValueError("DistributedOptimizer.synchronize: parameter-server modes update in step()")
        self._averager.synchronize()

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("DistributedOptimizer.step: closures are not supported")
        if self._servers is not None:
            self._servers.step()
            # LR schedulers count the wrapped optimizer's steps; the servers took this one.
            self._optimizer._step_count = getattr(self._optimizer, "_step_count", 0) + 1
            self._send_lr()
            return None
        self._averager.synchronize()
        result = self._optimizer.step()
        self._averager.zero_grad()
        return result

    def finish(self):
        """Parameter-server modes, after the last step: the chief waits for
        the other workers' last updates (async, SSP) and pulls the final
        parameters; then the servers are told this worker is done. shutdown()
        and interpreter exit call it too."""
        if self._servers is not None:
            self._servers.finish()
            _live_servers.discard(self)


def _finish_servers():
    for opt in list(_live_servers):
        opt.finish()


atexit.register(_finish_servers)
