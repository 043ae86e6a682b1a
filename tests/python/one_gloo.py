"""One Gloo in a Python process: tandem.torch and torch.distributed's gloo
backend both run collectives, in either order, in one process per worker.
Run under `tandem launch --workers N`; argv[1] is a directory every worker
sees (torch.distributed's file store)."""
import sys

import torch
import torch.distributed as dist

import tandem.torch as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}/store", rank=rank, world_size=size)
    expected = float(size * (size + 1) // 2)
    for round_ in range(3):
        mine = torch.full((1000,), float(rank + 1))
        ours = hvd.allreduce(mine.clone(), op=hvd.Sum)
        theirs = mine.clone()
        dist.all_reduce(theirs, op=dist.ReduceOp.SUM)
        if not (torch.all(ours == expected) and torch.all(theirs == expected)):
            print(f"FAIL rank {rank} round {round_}: tandem {ours[0].item()}, torch.distributed {theirs[0].item()}, "
                  f"expected {expected}", flush=True)
            return 1
    dist.barrier()
    dist.destroy_process_group()
    hvd.shutdown()
    print(f"ok rank {rank}: tandem.torch and torch.distributed (gloo) both summed to {expected}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
