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


def train(model, seed, warmup, steps, barrier=None, device="cpu", fused=None):
    gen = torch.Generator().manual_seed(seed)
    pool = [(torch.randn(BATCH, WIDTHS[0], generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
            for _ in range(POOL_BATCHES)]
    on_gpu = device != "cpu"
    if on_gpu:  # as a DataLoader with pin_memory feeds a GPU
        pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, fused=fused)

    def step(i):
        x, y = pool[i % POOL_BATCHES]
        if on_gpu:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()  # read every step, as Tandem does

    for i in range(warmup):
        step(i)
    if barrier:
        barrier()
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
    p.add_argument("--fused", action="store_true", help="torch.optim.Adam(fused=True): one kernel for the update")
    a = p.parse_args()

    rank, world = 0, 1
    if a.mode == "ddp":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    threads = a.threads or max(1, os.cpu_count() // (local if a.mode == "ddp" else 1))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    torch.manual_seed(a.seed)
    model = mlp()  # the same initial parameters on every rank
    if a.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
        seconds, loss = train(model, a.seed + rank, a.warmup, a.steps, barrier=dist.barrier)
        dist.barrier()
        dist.destroy_process_group()
    else:
        seconds, loss = train(model.to(a.device), a.seed, a.warmup, a.steps, device=a.device, fused=a.fused or None)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"updates_per_s": world * a.steps / seconds, "steps": a.steps, "seconds": seconds,
                       "threads": threads, "workers": world, "device": a.device, "fused": a.fused, "final_loss": loss, "torch_version": torch.__version__,
                       "api": "eager" if a.mode == "standalone" else "DistributedDataParallel, gloo, torchrun"}, f)


if __name__ == "__main__":
    main()
