"""PyTorch side of bench/live_recovery.sh: the usual answer to a dead worker.

Tandem's `cnn` (conv 3x3 stride 2 to 8 channels, BatchNorm, ReLU; conv 3x3 to
16, max-pool 2, BatchNorm, ReLU; Linear to 128, ReLU; Linear to 10) trained on
Fashion-MNIST with DistributedDataParallel over gloo, one rank per process
under `torchrun --max-restarts N`, as the torchrun docs advise an elastic
script to be written: rank 0 saves a checkpoint every --checkpoint-every
steps, and every (re)started rank loads the newest one before training.

When a rank dies, torchrun stops every rank and starts them all again; they
go on from the checkpoint. Rank 0 prints, with the wall-clock time:
  "step N at T"              after each step
  "training again at T from step S"   just before the first step of a
                             restarted group (restart count > 0)
which the bench reads to time a kill against the group training again.

Run it with .venv/bin/python's torchrun (the LibTorch that Tandem links).
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(16 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.bn1(self.conv1(x))
        x = self.bn2(F.max_pool2d(self.conv2(F.relu(x)), 2))
        x = F.relu(self.fc1(F.relu(x).flatten(1)))
        return self.fc2(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The agent's store outlives a restart, and init_process_group's keys
    # do not name the restart: a restarted group then read the failed
    # group's Gloo addresses and failed to connect (2 runs of 3 here). Keys
    # of their own per restart are the workaround.
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                         is_master=not agent and rank == 0)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"restart-{restarts}", base), rank=rank,
                            world_size=world)

    images = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    images = ((images - images.mean()) / images.std()).unsqueeze(1)
    labels = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))

    torch.manual_seed(a.seed)
    model = nn.parallel.DistributedDataParallel(Cnn())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    ckpt = os.path.join(a.out, "checkpoint.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]

    global_batch = a.batch_size * world
    per_epoch = labels.numel() // global_batch
    order, order_epoch = None, -1
    if rank == 0 and restarts > 0:
        print(f"training again at {time.time():.3f} from step {start}", flush=True)
    for step in range(start, a.steps):
        epoch = step // per_epoch
        if epoch != order_epoch:
            order = torch.randperm(labels.numel(), generator=torch.Generator().manual_seed(a.seed + epoch))
            order_epoch = epoch
        first = (step % per_epoch) * global_batch + rank * a.batch_size
        take = order[first:first + a.batch_size]
        loss = F.cross_entropy(model(images[take]), labels[take])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step + 1
        if rank == 0:
            print(f"step {done} at {time.time():.3f}", flush=True)
            if done % a.checkpoint_every == 0:
                tmp = ckpt + ".tmp"
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": done}, tmp)
                os.replace(tmp, ckpt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
