"""A plain PyTorch training script made distributed the Horovod way, with
tandem.torch. Every rank builds the same global batch per step and trains
on its contiguous slice; at the end each rank saves its parameters.
  train_mlp.py --out DIR [--steps N] [--plain] [--bad-rank R] [--mode M]
               [--optimizer sgd|adam] [--passes K] [--lr-drop STEP]
--plain trains the whole batch with torch alone (no tandem), the reference;
--bad-rank R gives rank R a different model, which must be refused;
--mode picks DistributedOptimizer's mode (ps-* under tandem launch --ps);
--push-bits 8|4 quantises its pushes (ps modes);
--passes K splits each rank's slice into K backward passes per step;
--lr-drop halves the learning rate from that step on, as a scheduler would."""
import argparse
import os

import torch
from torch import nn


def global_batch(step, size):
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 20, generator=gen)
    y = (x[:, :10].sum(1) > x[:, 10:].sum(1)).long()
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--bad-rank", type=int, default=-1)
    parser.add_argument("--mode", default="allreduce")
    parser.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--lr-drop", type=int, default=0)
    parser.add_argument("--wire-dtype", default="fp32")
    parser.add_argument("--local-steps", type=int, default=None)  # DiLoCo
    parser.add_argument("--outer", default="nesterov,0.7,0.9", help="DiLoCo: optimizer,lr,momentum")
    parser.add_argument("--push-bits", type=int, default=0)
    args = parser.parse_args()

    if args.plain:
        rank, size = 0, 1
    else:
        import tandem.torch as td
        td.init(wire_dtype=args.wire_dtype)
        rank, size = td.rank(), td.size()
    torch.manual_seed(7 + rank)  # different on purpose; the broadcast fixes it
    hidden = 65 if rank == args.bad_rank else 64
    model = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    if args.plain:
        torch.manual_seed(7)
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if not args.plain:
        td.broadcast_parameters(model.state_dict(), root_rank=0)
        td.broadcast_optimizer_state(optimizer, root_rank=0)
        outer_name, outer_lr, outer_momentum = args.outer.split(",")
        diloco = {} if args.local_steps is None else {
            "local_steps": args.local_steps, "outer_optimizer": outer_name, "outer_lr": float(outer_lr),
            "outer_momentum": float(outer_momentum)}
        optimizer = td.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), mode=args.mode,
                                            backward_passes_per_step=args.passes, push_bits=args.push_bits,
                                            **diloco)
    # After wrapping, as with Horovod: the scheduler counts the wrapper's steps.
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_drop or 10**9, gamma=0.5)

    local = args.global_batch // size
    for step in range(1, args.steps + 1):
        x, y = global_batch(step, args.global_batch)
        x, y = x[rank * local:(rank + 1) * local], y[rank * local:(rank + 1) * local]
        optimizer.zero_grad()
        loss = 0.0
        for xp, yp in zip(x.chunk(args.passes), y.chunk(args.passes)):
            part = nn.functional.cross_entropy(model(xp), yp) / args.passes
            part.backward()
            loss += part.detach()
        optimizer.step()
        scheduler.step()
        if not args.plain and args.mode == "allreduce":
            loss = td.allreduce(loss)
        if rank == 0 and (step == 1 or step % 10 == 0):
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    if not args.plain and args.mode != "allreduce":
        optimizer.finish()  # async: the chief pulls every worker's last update
    os.makedirs(args.out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out, f"rank{rank}.pt"))
    if not args.plain:
        td.shutdown()


if __name__ == "__main__":
    main()
