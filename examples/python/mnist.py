"""Fashion-MNIST with a small CNN, written as a Horovod user would, on
tandem.torch. Each worker trains on its own shard of every epoch; gradients
are averaged across workers in buckets while backward runs.

  build/tandem launch --workers 2 -- python3 examples/python/mnist.py --epochs 1
  (PYTHONPATH=build/python, or install the package: see the README)

Reads Debian's dataset-fashion-mnist (IDX files) with the standard library
and torch only."""
import argparse
import gzip
import os
import struct

import torch
from torch import nn

import tandem.torch as td


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).view(count, 1, rows, cols)
    if magic == 0x801:
        return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).long()
    raise ValueError(f"{path}: not an IDX image or label file (magic {magic:#x})")


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz")).float().div_(255)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    return (images - 0.2860) / 0.3530, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--max-steps", type=int, default=0, help="stop early (0: whole epochs)")
    args = parser.parse_args()

    td.init()
    torch.manual_seed(42)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * td.size(), momentum=0.9)
    td.broadcast_parameters(model.state_dict(), root_rank=0)
    td.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = td.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    step = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(epoch))
        shard = order[td.rank()::td.size()]
        for start in range(0, len(shard) - args.batch_size + 1, args.batch_size):
            idx = shard[start:start + args.batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            step += 1
            if step % 50 == 0 or step == 1:
                mean = td.allreduce(loss.detach())
                if td.rank() == 0:
                    print(f"epoch {epoch} step {step} loss {mean.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
    model.eval()
    with torch.no_grad():
        correct = torch.tensor([float((model(test_x).argmax(1) == test_y).sum())])
    correct = td.allreduce(correct, op=td.Sum) / td.size()  # every rank evaluated the same model
    if td.rank() == 0:
        print(f"test accuracy {correct.item() / len(test_x):.4f}", flush=True)
    td.shutdown()


if __name__ == "__main__":
    main()
