"""The MLP of bench/python_overhead.sh as a tandem.torch user writes it: a
plain PyTorch loop with td.DistributedOptimizer. Writes OUT/summary.json
with the job's samples/s over every step, as `tandem train` reports it.
  tandem_torch_bench.py --out DIR [--steps N] [--batch-size B] [--widths 1024,1024] [--mode allreduce|ps-sync]"""
import argparse
import json
import os
import time

import torch
from torch import nn

import tandem.torch as td


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--widths", default="1024,1024")
    p.add_argument("--mode", default="allreduce")
    args = p.parse_args()
    td.init()
    widths = [784] + [int(w) for w in args.widths.split(",")]
    layers = [nn.Flatten()]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(widths[-1], 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    td.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = td.DistributedOptimizer(opt, named_parameters=model.named_parameters(), mode=args.mode)
    gen = torch.Generator().manual_seed(td.rank())
    batches = [(torch.randn(args.batch_size, 1, 28, 28, generator=gen),
                torch.randint(0, 10, (args.batch_size,), generator=gen)) for _ in range(8)]
    step_seconds = 0.0
    for step in range(args.steps):
        x, y = batches[step % len(batches)]
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        step_seconds += time.perf_counter() - start
    if args.mode != "allreduce":
        opt.finish()
    if td.rank() == 0:
        os.makedirs(args.out, exist_ok=True)
        rate = args.steps * args.batch_size * td.size() / step_seconds
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({"samples_per_sec": rate, "step_breakdown": {"step": step_seconds / args.steps},
                       "threads": torch.get_num_threads(), "local_processes": td.local_size()}, f)
    td.shutdown()


if __name__ == "__main__":
    main()
