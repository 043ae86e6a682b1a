"""The workload Tandem's users first met as a TensorFlow parameter-server
example that ran at 1% of one GPU's speed: an MLP 256-4096-4096-256, MSE
loss, Adam at lr 1e-4, batch 128 of random inputs, 1 PS + 4 async workers.

    tandem launch --ps 1 --workers 4 -- python3 examples/python/seed_workload.py --steps 200

The targets come from a fixed random "teacher" network, so the loss has
somewhere to go. Each worker prints its loss and steps/s; worker 0 prints
the job's samples/s at the end. --hidden shrinks the model for a quick try,
--mode picks ps-sync, ps-ssp or allreduce instead."""
import argparse
import time

import torch
from torch import nn

import tandem.torch as td


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--mode", default="ps-async", choices=("ps-async", "ps-sync", "ps-ssp", "allreduce"))
    p.add_argument("--log-every", type=int, default=50)
    args = p.parse_args()
    td.init()
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(256, 64), nn.Tanh(), nn.Linear(64, 256))
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 256))
    opt = td.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr),
                                  named_parameters=model.named_parameters(), mode=args.mode)
    gen = torch.Generator().manual_seed(100 + td.rank())
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, 256, generator=gen)
        with torch.no_grad():
            y = teacher(x)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if step == 1 or step % args.log_every == 0:
            rate = step / (time.perf_counter() - started)
            print(f"worker {td.rank()} step {step} loss {loss.item():.5f} {rate:.2f} steps/s", flush=True)
    seconds = time.perf_counter() - started
    opt.finish()
    if td.rank() == 0:
        # Workers run at about the same speed here; the job's rate is theirs summed.
        print(f"job: about {args.steps * args.batch_size * td.size() / seconds:.0f} samples/s over {td.size()} "
              f"worker(s), {args.mode}", flush=True)
    td.shutdown()


if __name__ == "__main__":
    main()
