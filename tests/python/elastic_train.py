"""A Horovod elastic training script, written as Horovod's elastic docs
write one, with only the import changed. Run under `tandem launch
--min-workers N -- python elastic_train.py OUT STEP_DELAY_S [SIZE]`: it trains a
small regression for two epochs over an ElasticSampler, committing after
every batch, and writes OUT/rank<r>.json with its rank, the job's size,
the resets it went through, the samples it trained on, the loss over the
whole data before and after, and a checksum of its parameters. With SIZE, the ranks do not finish before the job has that
many workers again (a test's replacement may start slower than training
ends), committing while they wait."""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import tandem.torch as hvd

out, step_delay = sys.argv[1], float(sys.argv[2])
wait_for_size = int(sys.argv[3]) if len(sys.argv) > 3 else 0
epochs, batch_size, base_lr = 2, 16, 0.01

hvd.init()
torch.manual_seed(0)
features = torch.randn(768, 16)
targets = features @ torch.linspace(-1, 1, 16).unsqueeze(1)
dataset = torch.utils.data.TensorDataset(torch.arange(len(features)), features, targets)
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler)

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
with torch.no_grad():
    initial_loss = F.mse_loss(model(features), targets).item()  # every rank's model starts from seed 0
optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
resets = []
seen = []
entry_losses = []  # the loss over the whole data each time train() starts, after the state's sync


def on_state_reset():
    # Horovod's habit: the rate follows the number of workers.
    for group in optimizer.param_groups:
        group["lr"] = base_lr * hvd.size()
    resets.append(hvd.size())


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])


@hvd.elastic.run
def train(state):
    with torch.no_grad():
        entry_losses.append(F.mse_loss(model(features), targets).item())
    for state.epoch in range(state.epoch, epochs):
        for state.batch, (index, x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            seen.extend(index.tolist())
            sampler.record_batch(state.batch, batch_size)
            state.commit()
            if len(seen) == batch_size:
                print(f"training: rank {hvd.rank()} of {hvd.size()} committed its first batch", flush=True)
            time.sleep(step_delay)
        state.batch = 0
        sampler.set_epoch(state.epoch + 1)
    while hvd.size() < wait_for_size:
        state.commit()  # HostsUpdatedInterrupt once the replacement is in
        time.sleep(0.05)


train(state)
with torch.no_grad():
    final_loss = F.mse_loss(model(features), targets).item()
checksum = sum(p.detach().double().sum().item() for p in model.parameters())
with open(os.path.join(out, f"rank{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "resets": resets, "initial_loss": initial_loss,
               "entry_losses": entry_losses, "loss": final_loss,
               "checksum": checksum, "samples": len(seen)}, f)
hvd.shutdown()
