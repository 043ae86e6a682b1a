"""Horovod's SyncBatchNorm: batch normalisation whose batch statistics are
those of the global batch (every rank's), in training. The per-channel
sums travel in one differentiable allreduce, so backward is exact too."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from tandem import _C
from tandem.torch.ops import Sum, allreduce


class SyncBatchNorm(_BatchNorm):
    """A drop-in for torch.nn.BatchNorm1d/2d/3d (inputs [N, C, ...])."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected an input of 2 or more dimensions, got {input.dim()}")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or _C.size() == 1:
            return super().forward(input)
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([input.numel() / channels], dtype=input.dtype, device=input.device)
        local = torch.cat([input.sum(dims), (input * input).sum(dims), count])
        total = allreduce(local, op=Sum, name="sync_batch_norm")
        n = total[-1]
        mean = total[:channels] / n
        var = (total[channels:2 * channels] / n - mean * mean).clamp_min(0)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum)
                self.running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
                unbiased = var.detach() * (n.detach() / (n.detach() - 1).clamp_min(1))
                self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """A copy of `module` with every BatchNorm*d replaced by SyncBatchNorm."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight.copy_(module.weight)
                    out.bias.copy_(module.bias)
            if module.track_running_stats:
                out.running_mean.copy_(module.running_mean)
                out.running_var.copy_(module.running_var)
                out.num_batches_tracked.copy_(module.num_batches_tracked)
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out
