"""Horovod's process sets: some of the job's ranks, which run collectives
of their own (each set a Gloo communicator and a communication thread in
the runtime). Every rank adds and removes them, members or not, in the
same order."""
from tandem import _C


class ProcessSet:
    """Horovod's process set: some of the job's ranks (sorted), which run
    collectives of their own once add_process_set (or init's process_sets)
    has added them. ``rank()`` and ``size()`` are None until then."""

    process_set_id = None
    ranks = None

    def __init__(self, ranks):
        ranks = sorted(ranks)
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet takes a list of ranks (ints); MPI communicators are not supported by Tandem")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def _registered_ranks(self):
        if self.process_set_id == 0:
            return list(range(_C.size()))
        ranks = _C.process_sets().get(self.process_set_id)
        if ranks is None:
            raise ValueError(f"process set {self.process_set_id} does not exist or has not been added")
        return ranks

    def size(self):
        """The number of ranks in the set, on any rank; None before it is added."""
        return None if self.process_set_id is None else len(self._registered_ranks())

    def rank(self):
        """This process's rank within the set; None before it is added.
        Collectives still take the job's ranks (broadcast's root_rank)."""
        if self.process_set_id is None:
            return None
        ranks = self._registered_ranks()
        if _C.rank() not in ranks:
            raise ValueError(f"rank {_C.rank()} is not part of process set {self.process_set_id} (ranks {ranks})")
        return ranks.index(_C.rank())

    def included(self):
        """Whether this process is one of the set's ranks."""
        return None if self.ranks is None else _C.rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_added = {}  # id -> the ProcessSet objects added under it


def _set_id(process_set, call):
    """The runtime's id of ``process_set``, which must be added."""
    if process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"{call}: process_set must be a ProcessSet (hvd.add_process_set makes one), "
                         f"not {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{call}: {process_set} has not been added (hvd.add_process_set), or was removed")
    return process_set.process_set_id


def _rank_size(set_id):
    """This rank's rank in set ``set_id`` and the set's size (a member's)."""
    if set_id == 0:
        return _C.rank(), _C.size()
    ranks = _C.process_sets()[set_id]
    return ranks.index(_C.rank()), len(ranks)


def add_process_set(process_set):
    """Adds ``process_set`` (a ProcessSet or a list of ranks) and returns it.
    Every rank calls it, members or not, in the same order as the others'
    add and remove calls. Unlike Horovod, HOROVOD_DYNAMIC_PROCESS_SETS is not
    needed. ValueError for a set that exists already (all ranks: the global
    one), a rank outside the job or given twice."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set is global_process_set:
        raise ValueError(f"add_process_set: {process_set} is the global process set, always there")
    process_set.process_set_id = _C.add_process_set(process_set.ranks)
    _added.setdefault(process_set.process_set_id, []).append(process_set)
    return process_set


def remove_process_set(process_set):
    """Removes an added set (every rank calls it, as add_process_set) and
    returns True; False for the global set or one not added. Every object
    added under its id is reset, so that rank() and size() return None."""
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    for added in _added.pop(set_id, [process_set]):
        added._invalidate()
    process_set._invalidate()
    return _C.remove_process_set(set_id)


def _forget_process_sets():
    """shutdown(): the runtime's sets are gone with the job."""
    for sets in _added.values():
        for added in sets:
            added._invalidate()
    _added.clear()
    global_process_set.ranks = []
