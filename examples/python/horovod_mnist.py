"""A Horovod PyTorch training script in the layout of Horovod's own MNIST
example, on Fashion-MNIST: DistributedSampler shards, parameters and
optimizer state broadcast from rank 0, DistributedOptimizer with optional
fp16 compression and gradient predivision, metrics averaged with allreduce,
and a mixed-precision loop that reduces the gradients (synchronize()),
unscales them, then steps inside skip_synchronize(). Only the import line
says Tandem:

  build/tandem launch --workers 2 -- python3 examples/python/horovod_mnist.py --epochs 1
  ... --fp16-allreduce        (gradients on the wire in 16 bits)
  ... --use-mixed-precision   (autocast in bfloat16 on CPU, float16 on CUDA)
"""
import argparse
import gzip
import os
import struct

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tandem.torch as hvd


def idx_tensor(path):
    """An IDX file (images or labels) as a uint8 tensor."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, count = struct.unpack(">II", raw[:8])
    dims = [count] + [struct.unpack(">I", raw[8 + 4 * i:12 + 4 * i])[0] for i in range((magic & 0xFF) - 1)]
    header = 4 + 4 * len(dims)
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).view(dims)


def dataset(data_dir, split):
    images = idx_tensor(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz")).float().div_(255).unsqueeze(1)
    labels = idx_tensor(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz")).long()
    return TensorDataset((images - 0.2860) / 0.3530, labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a = nn.Conv2d(1, 12, kernel_size=5)
        self.conv_b = nn.Conv2d(12, 24, kernel_size=5)
        self.drop = nn.Dropout2d(0.25)
        self.hidden = nn.Linear(24 * 4 * 4, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv_a(x), 2))
        x = F.relu(F.max_pool2d(self.drop(self.conv_b(x)), 2))
        x = F.dropout(F.relu(self.hidden(x.flatten(1))), training=self.training)
        return F.log_softmax(self.out(x), dim=1)


def averaged(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train_epoch(args, model, optimizer, loader, sampler, epoch, scaler, device):
    model.train()
    sampler.set_epoch(epoch)
    for batch, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        if args.use_mixed_precision:
            low = torch.bfloat16 if device.type == "cpu" else torch.float16
            with torch.autocast(device.type, dtype=low):
                loss = F.nll_loss(model(data), target)
            scaler.scale(loss).backward()
            optimizer.synchronize()  # every gradient reduced across the ranks
            scaler.unscale_(optimizer)  # then unscaled in place
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
            scaler.update()
        else:
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        if batch % args.log_interval == 0 and hvd.rank() == 0:
            print(f"epoch {epoch} [{batch * len(data)}/{len(sampler)}] loss {loss.item():.4f}", flush=True)
        if args.max_batches and batch + 1 >= args.max_batches:
            break


def evaluate(model, loader, sampler, device):
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            output = model(data.to(device))
            loss += F.nll_loss(output, target.to(device), reduction="sum").item()
            correct += (output.argmax(1) == target.to(device)).sum().item()
    loss = averaged(loss / len(sampler), "avg_loss")
    accuracy = averaged(correct / len(sampler), "avg_accuracy")
    if hvd.rank() == 0:
        print(f"test loss {loss:.4f}, test accuracy {accuracy:.4f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description="Fashion-MNIST, Horovod-style")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--no-cuda", action="store_true")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--use-mixed-precision", action="store_true")
    parser.add_argument("--use-adasum", action="store_true")
    parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--max-batches", type=int, default=0, help="per epoch (0: all)")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    cuda = not args.no_cuda and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda" if cuda else "cpu")
    torch.set_num_threads(1)

    train_set, test_set = dataset(args.data_dir, "train"), dataset(args.data_dir, "t10k")
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net().to(device)
    # Adasum needs no learning-rate scaling; averaging does.
    scale = 1 if args.use_adasum else hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * scale, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)
    scaler = torch.amp.GradScaler(device.type) if args.use_mixed_precision else None

    for epoch in range(1, args.epochs + 1):
        train_epoch(args, model, optimizer, train_loader, train_sampler, epoch, scaler, device)
        evaluate(model, test_loader, test_sampler, device)


if __name__ == "__main__":
    main()
