"""Horovod's elastic API (hvd.elastic): state objects that commit, restore
and sync, and ``run``, which keeps a training function going while workers
die and join. In a job started with ``tandem launch --min-workers N`` a
failed collective raises HorovodInternalError (PeerError, for a dead or
silent peer): ``run`` restores
the last commit, the survivors agree on the next members in-process and go
on. A worker the launcher starts again (``--max-restarts``) joins at the
others' next commit, which raises HostsUpdatedInterrupt; the state is then
synced from the rank with the newest (see _sync_root). Outside such a job the membership is fixed and ``run``
re-raises, naming how to start one."""
import copy
import functools
import math

import torch

from tandem import _C
from tandem.torch.ops import broadcast_object
from tandem.torch.optimizer import broadcast_optimizer_state, broadcast_parameters

HorovodInternalError = _C.HorovodInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised at a commit when the job's members are about to change (a
    worker waits to join, or one died): every rank raises it at the same
    commit. ``skip_sync``: Horovod's, true only when ranks were removed and
    none added; Tandem syncs either way (False)."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's members are changing")
        self.skip_sync = skip_sync


def _sync_root():
    # Rank 0 unless the last reset left the newest state elsewhere: a
    # restarted worker 0 is rank 0 again but holds nothing yet.
    return _C.elastic_sync_root() if _C.is_initialized() else 0


class State:
    """Values kept across commits: commit() saves them and checks for a
    change of members, restore() returns to the last commit, sync() makes
    every rank hold rank 0's (after a reset, the newest: see _sync_root)."""

    def __init__(self, **kwargs):
        self._reset_callbacks = []
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._names = list(kwargs)
        self._saved = None
        self.save()

    def register_reset_callbacks(self, callbacks):
        """Each runs after the members changed, before the state is synced
        (e.g. to scale the learning rate by the new size())."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank at once when a change
        of members is pending (a collective: all ranks call it together)."""
        if _C.is_initialized() and _C.elastic_hosts_updated():
            raise HostsUpdatedInterrupt(False)

    # An ElasticSampler is kept as its state_dict and stays the same object,
    # which the user's DataLoader holds.
    def save(self):
        self._saved = {name: self._snapshot(getattr(self, name)) for name in self._names}

    def restore(self):
        for name, value in self._saved.items():
            self._put(name, copy.deepcopy(value))

    def sync(self):
        root = _sync_root()
        for name in self._names:
            self._put(name, broadcast_object(self._snapshot(getattr(self, name)), root))

    @staticmethod
    def _snapshot(value):
        return copy.deepcopy(value.state_dict() if isinstance(value, ElasticSampler) else value)

    def _put(self, name, value):
        if isinstance(getattr(self, name), ElasticSampler):
            getattr(self, name).load_state_dict(value)
        else:
            setattr(self, name, value)


ObjectState = State


class TorchState(State):
    """State over a model and an optimizer, and any other picklable values
    or ElasticSamplers."""

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
        root = _sync_root()
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=root)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=root)
        super().sync()


def run(func):
    """Horovod's elastic decorator: syncs the state, then runs
    ``func(state, ...)``. A dead peer's HorovodInternalError restores the
    last commit; it and HostsUpdatedInterrupt re-form the job with the
    members left and joined, call the state's reset callbacks, sync the
    state from the rank with the newest and run ``func`` again. Raises PeerError when
    the job cannot go on (fewer than --min-workers left)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except _C.MismatchError:
                raise  # ranks that called a collective differently would only do so again
            except HorovodInternalError as e:
                if not _C.elastic_enabled():
                    raise _C.PeerError(f"{e}; this job's membership is fixed: start it with tandem launch "
                                       "--min-workers N (and --max-restarts M) for hvd.elastic to go on") from e
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _C.elastic_reset()
            state.on_reset()

    return wrapper


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: the epoch's samples, shuffled by seed and
    epoch, less those the job has processed, dealt round-robin to the
    ranks of the moment. record_batch counts a batch of every rank as
    processed; after a change of members the sampler deals the rest among
    the new ranks. Call set_epoch at the end of an epoch (it clears the
    count), so that a partly done epoch is not done again."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of ``batch_size`` per rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = _C.size() if _C.is_initialized() else 1
        self.rank = _C.rank() if _C.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(order), generator=generator).tolist()
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        indices += indices[:self.total_size - len(indices)]  # every rank gets as many
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
