"""A Horovod-API program under `tandem launch --hosts 127.0.0.2:1,127.0.0.3:1`:
each rank alone on its host, and a sum over both."""
import torch

import tandem.torch as hvd

hvd.init()
assert hvd.size() == 2, f"size {hvd.size()}"
assert hvd.local_size() == 1 and hvd.local_rank() == 0, f"local {hvd.local_rank()} of {hvd.local_size()}"
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
assert total.item() == 3.0, f"rank {hvd.rank()}: sum {total.item()}"
print(f"rank {hvd.rank()} of {hvd.size()}, alone on its host: the sum over both hosts is {total.item():g}")
