"""Horovod's collectives on tensors and objects, over Tandem's C++ runtime.

Every rank must make the same calls in the same order; each call checks
first that the ranks agree (kind, dtype, op, shapes) and raises
HorovodInternalError (a RuntimeError; Tandem's MismatchError, also a
ValueError) naming the ranks that differ. A named ``*_async`` call while
another of that name still runs raises ValueError, as in Horovod. An ``*_async`` call returns a handle at once;
the collective runs on Tandem's communication thread, in call order, and
``synchronize(handle)`` returns its result (``poll(handle)`` says whether it
has finished). Tensors of any device and layout travel through a contiguous
host copy when they must.
"""
import io
import pickle

import torch

from tandem import _C
from tandem.torch.compression import Compression
from tandem.torch.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: F401
                                       remove_process_set, _forget_process_sets, _rank_size, _set_id)

__all__ = ["Sum", "Average", "Min", "Max", "Product", "Adasum", "ProcessSet", "global_process_set",
           "add_process_set", "remove_process_set", "poll", "synchronize", "allreduce", "allreduce_",
           "allreduce_async", "allreduce_async_", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
           "grouped_allreduce_async_", "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
           "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async",
           "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
           "sparse_allreduce_async", "broadcast_object", "allgather_object", "barrier", "join"]

# Reduction ops, numbered as tandem::ReduceOp.
Sum, Average, Min, Max, Product, Adasum = range(6)
_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}


def _op_of(op, average, call):
    """Horovod's rule: op supersedes the older average=; the default is Average."""
    if op is not None and average is not None:
        raise ValueError(f"{call}: the op parameter supersedes average; give only one of them")
    if op is None:
        op = Sum if average is False else Average
    if op not in _OPS:
        raise ValueError(f"{call}: op must be one of tandem.torch.Sum, Average, Min, Max, Product, Adasum; got {op!r}")
    return op


class _Handle:
    """An asynchronous collective; finish(outputs) makes its result."""

    def __init__(self, work, finish, name=None):
        self._work = work
        self._finish = finish
        self._name = name


# Named collectives still running, by name: as in Horovod, a second one of
# the same name is refused until the first has finished.
_running = {}  # by (process set id, name)


def _start(call, name, start, finish, set_id=0):
    """Starts a collective (``start()`` returns its work) under ``name``,
    which must be unique among the running ones of its process set."""
    key = None if name is None else (set_id, str(name))
    if key is not None:
        earlier = _running.get(key)
        if earlier is not None and not earlier.poll():
            raise ValueError(f"{call}: a collective named {str(name)!r} is still running; synchronize its handle "
                             "before starting another of that name")
    work = start()
    if key is not None:
        _running[key] = work
    return _Handle(work, finish, key)


def poll(handle):
    """True once the collective behind ``handle`` has finished."""
    return handle._work.poll()


def synchronize(handle):
    """Waits for the collective behind ``handle`` and returns its result."""
    try:
        outputs = handle._work.wait()
    finally:
        if handle._name is not None and _running.get(handle._name) is handle._work:
            del _running[handle._name]
    return handle._finish(outputs)


def _name(name):
    return "" if name is None else str(name)


# -- allreduce --------------------------------------------------------------
# Every function below takes Horovod's process_set; the private helpers take
# its id (``sid``), 0 being every rank.

def _adasum_pair(a, b):
    """Adasum of two gradients (float64): their sum less half the projection
    of each onto the other, so orthogonal ones add and parallel ones average.
    A vector of (almost) no length keeps its coefficient 1, as in Horovod."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    tiny = 1.4916681462400413e-154  # sqrt of the smallest normal double
    return (1 - dot / (2 * aa) if aa >= tiny else 1.0) * a + (1 - dot / (2 * bb) if bb >= tiny else 1.0) * b


def _adasum_tree(rows):
    """Every rank's values (one row each) combined pairwise up a binary tree
    in rank order: Adasum(Adasum(r0, r1), Adasum(r2, r3)), ..."""
    level = list(rows)
    while len(level) > 1:
        level = [_adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _adasum_async_(tensors, prescale_factor, postscale_factor, name, single, sid, call):
    """Horovod's Adasum, tensor by tensor (each its own coefficients): every
    rank's values are gathered, in one message, and each rank combines them
    up the same tree in float64. Power-of-2 ranks and the global set only,
    float16, float32 and float64, as in Horovod."""
    if sid != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    n = _C.size()
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")
    for t in tensors:
        if t.dtype not in (torch.float16, torch.float32, torch.float64):
            raise _C.HorovodInternalError(f"{call}: Adasum reduces float16, float32 and float64 tensors, as Horovod "
                                          f"does, not {t.dtype}")
    sizes = [t.numel() for t in tensors]
    flat = torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors]) * float(prescale_factor)

    def finish(out):
        gathered = out[0].reshape(n, -1)
        start = 0
        for t, count in zip(tensors, sizes):
            combined = _adasum_tree(gathered[:, start:start + count]) * float(postscale_factor)
            t.detach().copy_(combined.reshape(t.shape))
            start += count
        return tensors[0] if single else list(tensors)

    return _start(call, name, lambda: _C.allgather_async(flat.reshape(1, -1), _name(name), 0), finish, 0)


def _allreduce_async_(tensors, op, prescale_factor, postscale_factor, name, single, sid=0, call="allreduce"):
    if op == Adasum:
        return _adasum_async_(tensors, prescale_factor, postscale_factor, name, single, sid, call)
    return _start(call, name,
                  lambda: _C.allreduce_async_(list(tensors), op, float(prescale_factor), float(postscale_factor),
                                              _name(name), sid),
                  (lambda out: out[0]) if single else (lambda out: list(out)), sid)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing ``tensor`` in place over the set's ranks; returns a handle."""
    sid = _set_id(process_set, "allreduce_async_")
    op = _op_of(op, average, "allreduce_async_")
    return _allreduce_async_([tensor], op, prescale_factor, postscale_factor, name, True, sid)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing a copy of ``tensor``; synchronize() returns the result."""
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces ``tensor`` in place over the set's ranks and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, prescale, postscale, name, sid):
        ctx.op, ctx.prescale, ctx.postscale, ctx.sid = op, prescale, postscale, sid
        return synchronize(_allreduce_async_([tensor.detach().clone()], op, prescale, postscale, name, True, sid))

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (Sum, Average, Adasum):
            raise RuntimeError(f"allreduce: no gradient through op {_OPS[ctx.op]} (Sum, Average and Adasum have one)")
        out = synchronize(_allreduce_async_([grad.detach().clone()], ctx.op, ctx.prescale, ctx.postscale, None, True,
                                            ctx.sid))
        return out, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of ``tensor`` over the set's ranks (a new tensor;
    differentiable for Sum and Average). ``compression`` may send it in 16 bits."""
    sid = _set_id(process_set, "allreduce")
    op = _op_of(op, average, "allreduce")
    compressed, ctx = compression.compress(tensor)
    summed = _AllreduceFunction.apply(compressed, op, float(prescale_factor), float(postscale_factor), name, sid)
    return compression.decompress(summed, ctx)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    sid = _set_id(process_set, "grouped_allreduce_async_")
    op = _op_of(op, average, "grouped_allreduce_async_")
    return _allreduce_async_(tensors, op, prescale_factor, postscale_factor, name, False, sid)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    return grouped_allreduce_async_([t.detach().clone() for t in tensors], average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces every tensor in place, in one message (one dtype)."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


class _GroupedAllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, prescale, postscale, name, sid, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.sid = op, prescale, postscale, sid
        return tuple(synchronize(_allreduce_async_([t.detach().clone() for t in tensors], op, prescale, postscale,
                                                   name, False, sid)))

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (Sum, Average, Adasum):
            raise RuntimeError(f"grouped_allreduce: no gradient through op {_OPS[ctx.op]} (Sum, Average and Adasum "
                               "have one)")
        out = synchronize(_allreduce_async_([g.detach().clone() for g in grads], ctx.op, ctx.prescale, ctx.postscale,
                                            None, False, ctx.sid))
        return (None, None, None, None, None, *out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Returns the reductions of ``tensors`` (new tensors), sent in one message;
    differentiable for Sum and Average, as allreduce is."""
    sid = _set_id(process_set, "grouped_allreduce")
    op = _op_of(op, average, "grouped_allreduce")
    packed = [compression.compress(t) for t in tensors]
    out = _GroupedAllreduceFunction.apply(op, float(prescale_factor), float(postscale_factor), name, sid,
                                          *[t for t, _ in packed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(out, packed)]


# -- allgather, broadcast, alltoall, reducescatter --------------------------

def _allgather_async(tensor, name, sid):
    return _start("allgather", name, lambda: _C.allgather_async(tensor, _name(name), sid), lambda out: out[0], sid)


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _allgather_async(tensor, name, _set_id(process_set, "allgather_async"))


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, sid):
        ctx.rows, ctx.sid = tensor.shape[0], sid
        return synchronize(_allgather_async(tensor, name, sid))

    @staticmethod
    def backward(ctx, grad):
        # Horovod's: the ranks' gradients averaged, then this rank's rows.
        averaged = synchronize(_allreduce_async_([grad.detach().clone()], Average, 1.0, 1.0, None, True, ctx.sid))
        rows = synchronize(_allgather_async(torch.tensor([ctx.rows]), None, ctx.sid))
        start = int(rows[:_rank_size(ctx.sid)[0]].sum())
        return averaged.narrow(0, start, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates the set's ranks' tensors along the first dimension, in
    rank order (the first dimension may differ across ranks). Differentiable."""
    return _AllgatherFunction.apply(tensor, name, _set_id(process_set, "allgather"))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return [allgather(t, name, process_set) for t in tensors]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    handles = [allgather_async(t, None if name is None else f"{name}.{i}", process_set) for i, t in enumerate(tensors)]
    return _Group(handles)


class _Group(_Handle):
    """Several handles as one."""

    def __init__(self, handles):
        self._handles = handles
        self._name = None  # each part holds its own name

    @property
    def _work(self):
        return self

    def poll(self):
        return all(poll(h) for h in self._handles)

    def wait(self):
        return [synchronize(h) for h in self._handles]

    def _finish(self, outputs):
        return outputs


class _SparseHandle(_Group):
    """sparse_allreduce_async's handle: callable, as Horovod's is, and good
    for poll() and synchronize() too."""

    def __init__(self, like, indices, values, op, size):
        super().__init__([indices, values])
        self._like, self._op, self._size = like, op, size

    def _finish(self, outputs):
        indices, values = outputs
        if self._op == Average:
            values = values / self._size
        return torch.sparse_coo_tensor(indices.t(), values, self._like.size())

    def __call__(self):
        return synchronize(self)


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Reduces a sparse COO tensor as Horovod does: every rank's indices and
    values are gathered, so the result (uncoalesced) holds every rank's
    entries, the values divided by the set's size for Average. Returns a
    handle to call (as Horovod's) or to synchronize()."""
    sid = _set_id(process_set, "sparse_allreduce_async")
    if not tensor.is_sparse:
        raise ValueError(f"sparse_allreduce_async: a sparse COO tensor, not a {tensor.layout} one")
    indices = _allgather_async(tensor._indices().t().contiguous(), None if name is None else f"{name}.indices", sid)
    values = _allgather_async(tensor._values(), None if name is None else f"{name}.values", sid)
    return _SparseHandle(tensor, indices, values, op, _rank_size(sid)[1])


def _broadcast_async_(tensor, root_rank, name, sid):
    return _start("broadcast", name, lambda: _C.broadcast_async_([tensor], int(root_rank), _name(name), sid),
                  lambda out: out[0], sid)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's ``tensor`` into the set's other ranks', in
    place. root_rank is the job's rank (Horovod's), and must be in the set."""
    return _broadcast_async_(tensor, root_rank, name, _set_id(process_set, "broadcast_async_"))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies root_rank's ``tensor`` into the set's other ranks', in place, and returns it."""
    with torch.no_grad():
        return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, sid):
        ctx.root_rank, ctx.sid = root_rank, sid
        return synchronize(_broadcast_async_(tensor.detach().clone(), root_rank, name, sid))

    @staticmethod
    def backward(ctx, grad):
        summed = synchronize(_allreduce_async_([grad.detach().clone()], Average, 1.0, 1.0, None, True, ctx.sid))
        return (summed if _C.rank() == ctx.root_rank else summed.zero_()), None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's ``tensor`` on the set's ranks (a new tensor; differentiable)."""
    return _BroadcastFunction.apply(tensor, int(root_rank), name, _set_id(process_set, "broadcast"))


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def _alltoall_async(tensor, splits, name, sid):
    return _start("alltoall", name, lambda: _C.alltoall_async(tensor, _splits_list(splits), _name(name), sid),
                  lambda out: (out[0], out[1]), sid)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _alltoall_async(tensor, splits, name, _set_id(process_set, "alltoall_async"))


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, sid):
        output, received_splits = synchronize(_alltoall_async(tensor, splits, name, sid))
        ctx.received_splits, ctx.sid = received_splits, sid
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad, *unused):
        # Each row's gradient goes back to the rank that sent it.
        back, _ = synchronize(_alltoall_async(grad.contiguous(), ctx.received_splits, None, ctx.sid))
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[r]`` rows of ``tensor`` (in order) to the set's rank r
    and returns the rows every rank sent here, in rank order; with
    ``splits`` also how many came from each (int32), as Horovod does.
    Without splits the rows divide evenly over the ranks. Differentiable:
    the gradient of each row goes back to its sender."""
    return _AlltoallFunction.apply(tensor, splits, name, _set_id(process_set, "alltoall"))


def _share_of(reduced, rows, sid):
    """This rank's rows of a reduction: the first ranks take one more row
    when the first dimension does not divide evenly, as in Horovod."""
    r, n = _rank_size(sid)
    share, extra = divmod(rows, n)
    return reduced.narrow(0, r * share + min(r, extra), share + (1 if r < extra else 0))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set's ranks; synchronize() returns
    this rank's share of the first dimension. Sum and Average only, as in
    Horovod (HorovodInternalError otherwise, and for a rank-zero tensor)."""
    sid = _set_id(process_set, "reducescatter_async")
    if op not in (Sum, Average):
        raise _C.HorovodInternalError(f"reducescatter: op must be Sum or Average, as in Horovod; got {_OPS.get(op, op)}")
    if tensor.dim() == 0:
        raise _C.HorovodInternalError("reducescatter: a rank-zero tensor has no first dimension to scatter")
    rows = tensor.shape[0]
    return _start("reducescatter", name,
                  lambda: _C.allreduce_async_([tensor.detach().clone()], op, float(prescale_factor),
                                              float(postscale_factor), _name(name), sid),
                  lambda out: _share_of(out[0], rows, sid), sid)


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        sid = _set_id(process_set, "reducescatter")
        ctx.scale = (_rank_size(sid)[1] if op == Sum else 1) * prescale * postscale
        ctx.sid = sid
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        # Horovod's rule: every rank's share gathered back, times the set's
        # size for Sum and the scale factors (not divided for Average).
        return synchronize(_allgather_async(grad.contiguous() * ctx.scale, None, ctx.sid)), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over the set's ranks and returns this rank's share
    of the first dimension (the first ranks take one more row when it does
    not divide evenly), as Horovod does. Differentiable, with Horovod's gradient."""
    _set_id(process_set, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    out = _ReducescatterFunction.apply(compressed, name, op, float(prescale_factor), float(postscale_factor),
                                       process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    return _Group([reducescatter_async(t, None if name is None else f"{name}.{i}", op, process_set, prescale_factor,
                                       postscale_factor) for i, t in enumerate(tensors)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    return [reducescatter(t, None if name is None else f"{name}.{i}", compression, op, process_set, prescale_factor,
                          postscale_factor) for i, t in enumerate(tensors)]


# -- objects, barrier, join --------------------------------------------------

def _to_bytes(obj):
    buffer = io.BytesIO()
    pickle.dump(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's ``obj`` (any picklable object) on the set's ranks;
    root_rank is the job's rank."""
    _set_id(process_set, "broadcast_object")
    payload = _to_bytes(obj) if _C.rank() == root_rank else torch.empty(0, dtype=torch.uint8)
    length = broadcast_(torch.tensor([payload.numel()], dtype=torch.int64), root_rank, name, process_set)
    if _C.rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name, process_set)
    return obj if _C.rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the set's ranks' ``obj`` (any picklable object), as a list in rank order."""
    sid = _set_id(process_set, "allgather_object")
    payload = _to_bytes(obj)
    lengths = synchronize(_allgather_async(torch.tensor([payload.numel()], dtype=torch.int64), name, sid))
    gathered = synchronize(_allgather_async(payload, name, sid)).numpy().tobytes()
    out, start = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(gathered[start:start + n]))
        start += n
    return out


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    _C.barrier(_set_id(process_set, "barrier"))


def join(device=-1):
    """This rank has no more data: until every rank has joined, it takes part
    in the others' allreduce calls and DistributedOptimizer steps with zeros
    (Average still divides by size(), as in Horovod). Returns the rank that
    joined last."""
    return _C.join()
