"""Horovod's DistributedOptimizer and the parameter and optimizer-state
broadcasts, over Tandem's C++ gradient buckets and parameter servers."""
import warnings
import weakref
from contextlib import contextmanager

import torch

from tandem import _C
from tandem.torch import _options
from tandem.torch._options import DEFAULTS
from tandem.torch.compression import Compression, wire_dtype_of
from tandem.torch.adasum_optimizer import _DistributedAdasumOptimizer
from tandem.torch.ops import Adasum, Average, Sum, broadcast_object, global_process_set, _set_id, _OPS

_MODES = tuple(_C.mode_names())
_live_servers = weakref.WeakSet()  # PS-mode optimizers to finish at shutdown


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Copies ``params`` (a state_dict, or (name, tensor) pairs) from root_rank
    to every rank, in place. Every rank must pass the same names and shapes."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    tensors = [t for _, t in items if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        _C.broadcast_([t.data for t in tensors], int(root_rank))


def broadcast_optimizer_state(optimizer, root_rank=0, prefix="Parameter.", model=None):
    """Makes every rank's optimizer state (hyper-parameters and tensors such
    as momentum buffers and Adam moments) root_rank's, whatever state the
    other ranks held (none yet, or another checkpoint's).

    As in Horovod, a rank whose optimizer has no state yet first creates it:
    every parameter that requires grad gets a zero gradient and the
    optimizer steps once, here only (a DistributedOptimizer's own step,
    which every rank would have to call, is bypassed). That step is a real
    one: Adam's count becomes 1, and weight decay shrinks the parameters
    once. Parameter-server modes hold the state on the servers: nothing is
    stepped there."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS keeps no state that can be broadcast, as in "
                         "Horovod")
    if not optimizer.state_dict()["state"] and getattr(optimizer, "_mode", "allreduce") == "allreduce":
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        if optimizer.__module__ in (_DistributedOptimizer.__module__, _DistributedAdasumOptimizer.__module__):
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if _C.rank() != root_rank:
        optimizer.load_state_dict(state)


def _server_settings(optimizer):
    """What the parameter servers run for a torch.optim optimizer, read from
    its first parameter group (every group must agree)."""
    kinds = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
             torch.optim.RMSprop: "rmsprop"}
    base = next((c for c in type(optimizer).__mro__ if c in kinds), None)
    if base is None:
        raise ValueError(f"DistributedOptimizer: the parameter servers run torch.optim.SGD, Adam, AdamW or RMSprop, "
                         f"not {type(optimizer).__name__}; use mode='allreduce' for other optimizers")
    name = kinds[base]
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


def _inner_settings(optimizer):
    """DiLoCo's servers run the outer optimizer; the inner one is the user's
    own, stepping here, so only its rate is read."""
    return {"name": "sgd", "lr": float(optimizer.param_groups[0]["lr"]), "momentum": 0.0, "nesterov": False,
            "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "alpha": 0.99, "centered": False}


def _named(optimizer, named_parameters):
    """(name, parameter) for every parameter the optimizer updates, in the
    model's order when named_parameters is given (Horovod's checks)."""
    ours = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        return [(f"allreduce.noname.{i}", p) for i, p in enumerate(ours) if p.requires_grad]
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError("DistributedOptimizer: named_parameters should be a sequence of (name, parameter) tuples, "
                         "usually model.named_parameters()")
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError("DistributedOptimizer: parameter names in named_parameters must be unique; duplicates: "
                         f"{sorted({n for n in names if names.count(n) > 1})}")
    by_id = {id(p) for _, p in named}
    if any(id(p) not in by_id for p in ours):
        raise ValueError("DistributedOptimizer: named_parameters was given, but one or more of the optimizer's "
                         "parameters are not in it")
    in_optimizer = {id(p) for p in ours}
    return [(n, p) for n, p in named if id(p) in in_optimizer and p.requires_grad]


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods DistributedOptimizer adds to the user's optimizer class."""

    def __init__(self, params, named, mode, averager_args, server_args, server_options, diloco):
        super(self.__class__, self).__init__(params)
        self._mode = mode
        self._diloco = diloco
        self._named = named
        self._averager_args = averager_args
        self._averager = None
        self._servers = None
        self._should_synchronize = True
        self._synchronized = False
        self._sparse_as_dense = False
        if mode == "allreduce":
            self._averager = _C.GradientAverager(named, *averager_args)
        else:
            # DiLoCo: this optimizer steps here; any kind the servers' do not run works.
            settings = _server_settings(self) if not diloco else _inner_settings(self)
            staleness, passes = server_args
            self._servers = _C.PsOptimizer(named, mode, staleness, passes, settings, server_options)
            _live_servers.add(self)

    def set_backward_passes_per_step(self, passes):
        """A new number of backward passes per step (every rank must call it)."""
        if self._averager is None:
            raise ValueError("set_backward_passes_per_step: parameter-server modes take it at construction")
        self._averager = None  # its hooks go before the new one's
        self._averager_args = (int(passes),) + tuple(self._averager_args[1:])
        self._averager = _C.GradientAverager(self._named, *self._averager_args)

    def _send_lr(self):
        self._servers.set_lr(float(self.param_groups[0]["lr"]))

    def synchronize(self):
        """Waits until every .grad holds the reduction over all ranks (for
        gradient clipping or AMP unscaling before step(); then step inside
        skip_synchronize())."""
        if self._averager is None:
            raise ValueError("DistributedOptimizer.synchronize: parameter-server modes update in step()")
        self._averager.synchronize()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """step() inside it uses the gradients synchronize() already reduced."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("DistributedOptimizer.step: closures are not supported by Tandem")
        if self._servers is not None:
            if self._diloco:
                # The inner step here; the servers' outer one at a round's end.
                result = super(self.__class__, self).step()
                self._servers.step()
                return result
            self._servers.step()
            self._send_lr()
            return None
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(); the gradients are waited for twice")
            self.synchronize()
        elif not self._synchronized:
            raise ValueError("DistributedOptimizer.step inside skip_synchronize() needs optimizer.synchronize() "
                             "first: the gradients are still being reduced")
        self._synchronized = False
        if isinstance(self, torch.optim.SparseAdam):
            self._sparsify_grads()
        result = super(self.__class__, self).step()
        # The reduced .grad tensors are views of the exchange buffers: the
        # next backward must not add into them.
        self._averager.zero_grad()
        return result

    def _sparsify_grads(self):
        """SparseAdam takes only sparse gradients; they were reduced dense.
        As Horovod returns them: sparse_as_dense=True, element by element
        (its to_sparse()); otherwise by rows, as its default path gathers
        every rank's touched rows (a row whose mean is all zero is dropped)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not p.grad.is_sparse:
                    p.grad = p.grad.to_sparse() if self._sparse_as_dense else p.grad.to_sparse(min(1, p.grad.dim()))

    def zero_grad(self, set_to_none=True):
        """Unsets every gradient: a reduced gradient must not be added into."""
        if self._servers is not None:
            if not self._diloco:
                self._send_lr()  # a scheduler's new rate applies from this update on
            self._servers.zero_grad()
            return
        if self._averager.pending():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(); the gradients are being reduced")
        self._averager.zero_grad()
        self._synchronized = False

    def finish(self):
        """Parameter-server modes, after the last step: the chief waits for
        the other workers' last updates (async, SSP) and pulls the final
        parameters; then the servers are told this worker is done.
        shutdown() and interpreter exit call it too."""
        if self._servers is not None:
            self._servers.finish()
            _live_servers.discard(self)


@_options.documented("ps_chunk_mb", "local_steps", "outer_optimizer", "outer_lr", "outer_momentum", "push_bits",
                     "delay_compensation")
def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set, mode="allreduce", staleness=None,
                         ps_chunk_mb=DEFAULTS["ps_chunk_mb"], bucket_mb=None, local_steps=None,
                         outer_optimizer=DEFAULTS["outer_optimizer"], outer_lr=DEFAULTS["outer_lr"],
                         outer_momentum=DEFAULTS["outer_momentum"], push_bits=DEFAULTS["push_bits"],
                         delay_compensation=DEFAULTS["delay_compensation"]):
    """Wraps a torch.optim optimizer, as Horovod's does: the result is an
    instance of the optimizer's own class over the same parameter groups.

    mode="allreduce": gradients are reduced (op Average or Sum) in buckets
    from backward hooks, overlapped with the rest of backward; step() waits
    for them, then steps. ``compression`` Compression.fp16 or bf16 sends
    them in 16 bits. ``groups`` (an int) sets the number of buckets;
    ``bucket_mb`` their size (a Tandem extension). Sparse gradients are
    reduced dense; .grad is dense after the exchange, except for
    torch.optim.SparseAdam, which gets them back sparse (by rows, or element
    by element with sparse_as_dense=True, as Horovod's).

    mode="ps-sync", "ps-async" or "ps-ssp" (a Tandem extension, run under
    ``tandem launch --ps K``): each chunk of gradients is pushed to its
    parameter server from backward hooks; the servers run the optimizer
    (SGD, Adam, AdamW or RMSprop with this optimizer's settings, at the
    learning rate its first group holds at each zero_grad() and step(), so LR
    schedulers work), and step() installs the parameters pulled back.

    ``backward_passes_per_step`` passes add up before each step(), as in
    Horovod (divide the loss by it for their mean).

    ``op=Adasum`` (mode="allreduce"), as Horovod's: each rank steps this
    optimizer on its own gradients, parameter by parameter during backward,
    and step() applies the Adasum of the ranks' changes to the weights of
    before. Power-of-2 ranks, the global process set.

    ``process_set`` (mode="allreduce"): gradients are reduced among the
    set's ranks only; a rank outside it steps on its own gradients, as in
    Horovod.

    ``local_steps=H`` with mode="ps-sync" or "ps-async" (DiLoCo, a Tandem
    extension): this optimizer, of any kind, steps on each rank alone; every
    H steps the ranks push their change since the last global model and the
    servers apply ``outer_optimizer`` ("nesterov" or "sgd") at ``outer_lr``
    with ``outer_momentum`` to their mean (async: each as it arrives, scaled
    by 1/ranks), and step() installs the new global model. finish() ends a
    partial last round; in ps-sync every rank must make the same steps.

    ``push_bits=8`` or ``4`` with a ps mode (a Tandem extension): each push
    (gradient, or DiLoCo's change) travels in that many bits a value, with a
    float32 scale per 128 values, and what that loses is carried into the
    chunk's next push; pulls keep init(wire_dtype=...).
    """
    set_id = _set_id(process_set, "DistributedOptimizer")
    if mode not in _MODES:
        raise ValueError(f"DistributedOptimizer: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if staleness is not None and mode != "ps-ssp":
        raise ValueError(f"DistributedOptimizer: staleness applies to mode='ps-ssp', not {mode!r}")
    if op not in (Average, Sum, Adasum):
        raise ValueError(f"DistributedOptimizer: op must be Average, Sum or Adasum, got {_OPS.get(op, op)}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("DistributedOptimizer: gradient_predivide_factor applies to op=Average only")
    if op == Adasum:
        return _adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, set_id, mode)
    if int(backward_passes_per_step) < 1:
        raise ValueError("DistributedOptimizer: backward_passes_per_step must be > 0")
    outer = {"outer_optimizer": outer_optimizer, "outer_lr": outer_lr, "outer_momentum": outer_momentum}
    server_options = {"ps_chunk_mb": ps_chunk_mb, "local_steps": local_steps, "push_bits": push_bits,
                      "delay_compensation": delay_compensation, **outer}
    for keyword in ("push_bits", "delay_compensation"):
        if server_options[keyword] and mode == "allreduce":
            raise ValueError(f"DistributedOptimizer: {keyword} applies to the ps modes, not mode='allreduce'")
    _options.check("DistributedOptimizer", mode, **server_options)
    diloco = bool(local_steps)
    if diloco and mode not in ("ps-sync", "ps-async"):
        raise ValueError(f"DistributedOptimizer: local_steps (DiLoCo) applies to mode='ps-sync' or 'ps-async', "
                         f"not {mode!r}")
    if not diloco and any(value != DEFAULTS[keyword] for keyword, value in outer.items()):
        raise ValueError("DistributedOptimizer: outer_optimizer, outer_lr and outer_momentum apply with local_steps")
    named = _named(optimizer, named_parameters)
    wire = wire_dtype_of(compression, "DistributedOptimizer")
    if num_groups and groups is None:
        warnings.warn("num_groups is replaced by groups", DeprecationWarning)
        groups = num_groups
    if groups is not None and not isinstance(groups, int):
        raise ValueError("DistributedOptimizer: groups as lists of parameters are not supported by Tandem, which "
                         "fuses gradients into buckets by size; pass groups=N (N buckets) or bucket_mb")
    cap_mb = -1.0 if bucket_mb is None else float(bucket_mb)
    if groups:
        total = sum(p.numel() * 4 for _, p in named)
        cap_mb = max(total / groups, 4.0) / (1 << 20)
    if mode != "allreduce" and (wire or op != Average or gradient_predivide_factor != 1.0 or groups):
        raise ValueError("DistributedOptimizer: compression, op, gradient_predivide_factor and groups apply to "
                         "mode='allreduce'; parameter servers take init(wire_dtype=...)")
    if set_id != 0 and mode != "allreduce":
        raise ValueError("DistributedOptimizer: process_set applies to mode='allreduce'; parameter servers serve "
                         "every worker")
    averager_args = (int(backward_passes_per_step), op == Sum, float(gradient_predivide_factor), wire, cap_mb, set_id)
    server_args = (1 if staleness is None else int(staleness), int(backward_passes_per_step))
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    distributed = cls(optimizer.param_groups, named, mode, averager_args, server_args, server_options, diloco)
    distributed._sparse_as_dense = bool(sparse_as_dense)
    return distributed


def _adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, set_id, mode):
    """DistributedOptimizer(op=Adasum): the changes each rank's own steps
    make are combined, not the gradients (Horovod's)."""
    if mode != "allreduce":
        raise ValueError(f"DistributedOptimizer: op=Adasum applies to mode='allreduce', not {mode!r}")
    if set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    n = _C.size()
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")
    named = _named(optimizer, named_parameters)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
    return cls(optimizer.param_groups, named, compression, int(backward_passes_per_step))


def finish_servers():
    for opt in list(_live_servers):
        opt.finish()
