"""A Horovod-API program with a parameter server, under `tandem launch
--hosts 127.0.0.2:1,127.0.0.3:1 --ps 1`: the server on the second host
applies the workers' summed gradients, and both ranks hold its result."""
import torch

import tandem.torch as hvd

hvd.init()
assert hvd.size() == 2, f"size {hvd.size()}"
torch.manual_seed(0)
model = torch.nn.Linear(4, 1, bias=False)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), mode="ps-sync")
before = model.weight.detach().clone()
x = torch.ones(1, 4) * (hvd.rank() + 1)
opt.zero_grad()
model(x).sum().backward()
opt.step()
# The mean gradient over the ranks is (1 + 2) / 2 = 1.5 in every weight.
expected = before - 0.5 * 1.5
assert torch.allclose(model.weight, expected), f"rank {hvd.rank()}: {model.weight} != {expected}"
print(f"rank {hvd.rank()}: the server on the other host applied the mean gradient of both ranks")
