"""Horovod's elastic state API (hvd.elastic): state objects that commit,
restore and sync. Tandem does not change a job's membership in-process:
when a worker dies, ``tandem launch --max-restarts N`` restarts the job and
training resumes from its checkpoint. So ``run`` raises, naming that, where
Horovod would re-form the job."""
import copy
import functools

import torch

from tandem import _C
from tandem.torch.ops import broadcast_object
from tandem.torch.optimizer import broadcast_optimizer_state, broadcast_parameters


class State:
    """Values kept across commits: commit() saves them, restore() returns
    to the last commit, sync() makes every rank hold rank 0's."""

    def __init__(self, **kwargs):
        self._reset_callbacks = []
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._names = list(kwargs)
        self._saved = None
        self.commit()

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        self.save()

    def check_host_updates(self):
        """Membership never changes in-process under Tandem: nothing to do."""

    def save(self):
        self._saved = {name: copy.deepcopy(getattr(self, name)) for name in self._names}

    def restore(self):
        for name, value in self._saved.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self):
        for name in self._names:
            setattr(self, name, broadcast_object(getattr(self, name), 0))


ObjectState = State


class TorchState(State):
    """State over a model and an optimizer (and any other picklable values)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        super().__init__(**kwargs)

    def save(self):
        super().save()
        self._saved_model = copy.deepcopy(self.model.state_dict()) if self.model is not None else None
        self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None

    def restore(self):
        super().restore()
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()


def run(func):
    """Horovod's elastic decorator: syncs the state, then runs ``func(state)``.
    A dead or silent peer raises PeerError: Tandem re-forms jobs by restarting
    them (tandem launch --max-restarts), not in-process."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        try:
            return func(state, *args, **kwargs)
        except _C.PeerError as e:
            raise _C.PeerError(f"{e}; hvd.elastic cannot re-form the job in-process under Tandem: run it under "
                               "tandem launch --max-restarts N and resume from a checkpoint") from e

    return wrapper


class ElasticSampler(torch.utils.data.distributed.DistributedSampler):
    """Horovod's ElasticSampler for a job whose membership is fixed: a
    DistributedSampler over this job's ranks that can skip the samples
    already processed in this epoch (record_batch, set_epoch)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        super().__init__(dataset, num_replicas=_C.size(), rank=_C.rank(), shuffle=shuffle, seed=seed)
        self.processed = 0

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.processed = 0

    def record_batch(self, batch_idx, batch_size):
        self.processed += batch_size

    def __iter__(self):
        indices = list(super().__iter__())
        return iter(indices[self.processed:])

    def __len__(self):
        return max(0, super().__len__() - self.processed)
