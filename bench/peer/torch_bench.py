"""PyTorch side of bench/peer_frameworks.sh: the 256-4096-4096-256 MLP of
Tandem's `mlp` model (torch.nn.Linear+ReLU, Linear+ReLU, Linear; cross
entropy over 256 classes; torch.optim.Adam lr 1e-4, eps 1e-8; batch 128 of
synthetic data), in eager mode on the project venv's torch (the LibTorch that
Tandem links).

  standalone  one process, torch.set_num_threads(--threads)
  ddp         one rank of DistributedDataParallel over gloo, run under
              torchrun; threads: cores / ranks on this host (LOCAL_WORLD_SIZE),
              Tandem's rule, unless --threads is given

Writes one JSON result (rank 0): aggregate worker steps/s (optimizer updates
per second summed over the ranks, each of batch 128) over the steps after
warm-up.

--model resnet50 (standalone, for bench/gpu/check.sh): torchvision's
ResNet-50 (v1.5, 25,557,032 parameters with 1000 classes), written out here
as Tandem's `resnet50` is, on synthetic 3x224x224 batches; SGD momentum 0.9,
lr 0.1. --amp bf16, --channels-last and --compile (torch.compile) apply to
either model.

Run it with .venv/bin/python, whose torch is the LibTorch Tandem links.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTHS = [256, 4096, 4096, 256]
CLASSES = 256
BATCH = 128
LR = 1e-4
POOL_BATCHES = 8  # synthetic batches cycled through, made once


def mlp():
    layers = []
    for i in range(1, len(WIDTHS)):
        layers.append(nn.Linear(WIDTHS[i - 1], WIDTHS[i]))
        if i < len(WIDTHS) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out))
        self.down = (nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                     if stride != 1 or cin != out else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.down(x))


def resnet50(classes=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for i in range(blocks):
            layers.append(Bottleneck(cin, planes, 2 if stage > 0 and i == 0 else 1))
            cin = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def batches(model_name, batch, gen):
    if model_name == "resnet50":
        return [(torch.randn(batch, 3, 224, 224, generator=gen), torch.randint(0, 1000, (batch,), generator=gen))
                for _ in range(2)]
    return [(torch.randn(batch, WIDTHS[0], generator=gen), torch.randint(0, CLASSES, (batch,), generator=gen))
            for _ in range(POOL_BATCHES)]


def train(model, seed, warmup, steps, barrier=None, device="cpu", fused=None, model_name="mlp", batch=BATCH,
          amp=None, channels_last=False):
    gen = torch.Generator().manual_seed(seed)
    pool = batches(model_name, batch, gen)
    on_gpu = device != "cpu"
    if on_gpu:  # as a DataLoader with pin_memory feeds a GPU
        pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
    if model_name == "resnet50":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=fused)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, fused=fused)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)

    def step(i):
        x, y = pool[i % len(pool)]
        if on_gpu:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()  # read every step, as Tandem does

    for i in range(warmup):
        step(i)
    if barrier:
        barrier()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        loss = step(i)
    return time.perf_counter() - start, loss


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["standalone", "ddp"])
    p.add_argument("--threads", type=int, default=0, help="intra and inter op threads (ddp: 0 = cores / local ranks)")
    p.add_argument("--warmup", type=int, default=5, help="steps per worker not timed")
    p.add_argument("--steps", type=int, default=30, help="timed steps per worker")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True, help="result JSON (written by rank 0)")
    p.add_argument("--device", default="cpu", help="standalone: cpu or cuda (the model, its batches and Adam there)")
    p.add_argument("--fused", action="store_true", help="fused=True for the optimizer: one kernel for the update")
    p.add_argument("--model", choices=["mlp", "resnet50"], default="mlp", help="standalone only for resnet50")
    p.add_argument("--batch", type=int, default=0, help="samples per step (0: 128 for the MLP, 256 for ResNet-50)")
    p.add_argument("--amp", choices=["bf16", "fp16"], help="autocast the forward and loss")
    p.add_argument("--channels-last", action="store_true", help="4-d parameters and inputs in NHWC")
    p.add_argument("--compile", action="store_true", help="torch.compile(model); warm-up steps include compiling")
    a = p.parse_args()

    rank, world = 0, 1
    if a.mode == "ddp":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    threads = a.threads or max(1, os.cpu_count() // (local if a.mode == "ddp" else 1))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    torch.manual_seed(a.seed)
    model = resnet50() if a.model == "resnet50" else mlp()  # the same initial parameters on every rank
    batch = a.batch or (256 if a.model == "resnet50" else BATCH)
    if a.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
        seconds, loss = train(model, a.seed + rank, a.warmup, a.steps, barrier=dist.barrier)
        dist.barrier()
        dist.destroy_process_group()
    else:
        model = model.to(a.device)
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if a.compile:
            model = torch.compile(model)
        seconds, loss = train(model, a.seed, a.warmup, a.steps, device=a.device, fused=a.fused or None,
                              model_name=a.model, batch=batch, amp=a.amp, channels_last=a.channels_last)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"updates_per_s": world * a.steps / seconds, "steps": a.steps, "seconds": seconds,
                       "model": a.model, "batch": batch, "samples_per_s": world * a.steps * batch / seconds,
                       "ms_per_step": 1e3 * seconds / a.steps, "amp": a.amp, "channels_last": a.channels_last,
                       "compiled": a.compile, "parameters": sum(p.numel() for p in model.parameters()),
                       "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated() if a.device != "cpu" else 0,
                       "threads": threads, "workers": world, "device": a.device, "fused": a.fused, "final_loss": loss, "torch_version": torch.__version__,
                       "api": "eager" if a.mode == "standalone" else "DistributedDataParallel, gloo, torchrun"}, f)


if __name__ == "__main__":
    main()
