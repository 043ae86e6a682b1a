"""Writes the TorchScript modules the tests train, as a user would: define a
torch.nn.Module in Python, then torch.jit.script or torch.jit.trace it and
torch.jit.save it. Inputs are 1x28x28 with 10 classes (the tests' synthetic
data). Usage: make_torchscript.py OUT_DIR"""
import os
import sys

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, log_probs: bool = False):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.head = nn.Linear(32, 10)
        self.log_probs = log_probs

    def forward(self, x):
        y = self.head(self.body(x))
        return torch.log_softmax(y, dim=1) if self.log_probs else y


class BatchNormCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        y = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y, 1))


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        y = self.fc(torch.flatten(x, 1))
        return y, y


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(784, 10)
        self.b = nn.Linear(784, 10)
        self.b.weight = self.a.weight

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.a(x) + self.b(x)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(Mlp()), os.path.join(out, "mlp.pt"))
    torch.manual_seed(1)
    torch.jit.save(torch.jit.script(Mlp()), os.path.join(out, "mlp_other_init.pt"))
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(Mlp(log_probs=True)), os.path.join(out, "mlp_log_probs.pt"))
    torch.manual_seed(0)
    cnn = BatchNormCnn()
    torch.jit.save(torch.jit.trace(cnn, torch.zeros(2, 1, 28, 28)), os.path.join(out, "cnn_traced.pt"))
    torch.jit.save(torch.jit.script(TwoOutputs()), os.path.join(out, "two_outputs.pt"))
    torch.jit.save(torch.jit.script(Tied()), os.path.join(out, "tied.pt"))
    with open(os.path.join(out, "not_a_module.pt"), "wb") as f:
        f.write(b"this is not a TorchScript archive\n")


if __name__ == "__main__":
    main()
