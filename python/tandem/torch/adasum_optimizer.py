"""DistributedOptimizer(op=Adasum), as Horovod's: each rank steps its own
optimizer on its own gradients, parameter by parameter as backward reaches
them, and the ranks combine the changes this made (not the gradients) with
Adasum; step() applies the combined change to the weights of before."""
import weakref
from contextlib import contextmanager

import torch

from tandem.torch.ops import Adasum, allreduce_async_, synchronize


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """The methods DistributedOptimizer(op=Adasum) adds to the user's
    optimizer class."""

    def __init__(self, params, named, compression, backward_passes_per_step):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._passes_per_step = backward_passes_per_step
        self._names = {p: name for name, p in named}
        self._passes = {p: backward_passes_per_step for _, p in named}
        self._pending = {}  # parameter -> (weights before, its change, handle, compression context)
        this = weakref.ref(self)  # the hooks must not keep a dropped optimizer alive

        def on_gradient(p):
            optimizer = this()
            if optimizer is not None:
                optimizer._on_gradient(p)

        self._hooks = [p.register_post_accumulate_grad_hook(on_gradient) for _, p in named]

    def __del__(self):
        for hook in getattr(self, "_hooks", []):
            hook.remove()

    def _on_gradient(self, p):
        if p in self._pending:
            raise AssertionError("Gradients were computed more than backward_passes_per_step times before call to "
                                 "step(). Increase backward_passes_per_step to accumulate gradients locally.")
        self._passes[p] -= 1
        if self._passes[p] == 0:
            self._exchange(p)

    def _exchange(self, p):
        """Steps ``p`` alone with this rank's optimizer and starts combining
        the change with the other ranks'; ``p`` keeps its weights until step()."""
        groups = [g["params"] for g in self.param_groups]
        try:
            for g in self.param_groups:
                g["params"] = [p] if any(q is p for q in g["params"]) else []
            before = p.detach().clone()
            super(self.__class__, self).step()
        finally:
            for g, params in zip(self.param_groups, groups):
                g["params"] = params
        with torch.no_grad():
            change = p.detach() - before
            p.copy_(before)
        compressed, ctx = self._compression.compress(change)
        handle = allreduce_async_(compressed, name=f"adasum.{self._names[p]}", op=Adasum)
        self._pending[p] = (before, compressed, handle, ctx)

    def synchronize(self):
        """Nothing to wait for here: step() combines the changes (Horovod's)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        # Parameters whose gradients came short of backward_passes_per_step
        # (or never came) still step and take part, in the same order on every rank.
        for p in self._passes:
            if p not in self._pending:
                self._exchange(p)
        with torch.no_grad():
            for p, (before, compressed, handle, ctx) in self._pending.items():
                combined = self._compression.decompress(synchronize(handle), ctx)
                p.copy_(before + combined.to(p.dtype))
        self._pending.clear()
        for p in self._passes:
            self._passes[p] = self._passes_per_step
        return loss

    def zero_grad(self, set_to_none=True):
        if self._pending:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(set_to_none)
