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


class ProcessSet:
    """Horovod's process sets: Tandem has the global one only."""

    def __init__(self, ranks=None):
        self.ranks = ranks

    def included(self):
        return True


global_process_set = ProcessSet()


def _check_process_set(process_set, call):
    if process_set is not global_process_set:
        raise ValueError(f"{call}: process sets other than global_process_set are not supported by Tandem")


def add_process_set(process_set):
    raise ValueError("add_process_set: process sets other than global_process_set are not supported by Tandem")


def remove_process_set(process_set):
    raise ValueError("remove_process_set: process sets other than global_process_set are not supported by Tandem")


def _op_of(op, average, call):
    """Horovod's rule: op supersedes the older average=; the default is Average."""
    if op is not None and average is not None:
        raise ValueError(f"{call}: the op parameter supersedes average; give only one of them")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise ValueError(f"{call}: op=Adasum is not supported by Tandem (Sum, Average, Min, Max and Product are)")
    if op not in _OPS:
        raise ValueError(f"{call}: op must be one of tandem.torch.Sum, Average, Min, Max, Product; got {op!r}")
    return op


class _Handle:
    """An asynchronous collective; finish(outputs) makes its result."""

    def __init__(self, work, finish, name=None):
        self._work = work
        self._finish = finish
        self._name = name


# Named collectives still running, by name: as in Horovod, a second one of
# the same name is refused until the first has finished.
_running = {}


def _start(call, name, start, finish):
    """Starts a collective (``start()`` returns its work) under ``name``."""
    if name is not None:
        earlier = _running.get(str(name))
        if earlier is not None and not earlier.poll():
            raise ValueError(f"{call}: a collective named {str(name)!r} is still running; synchronize its handle "
                             "before starting another of that name")
    work = start()
    if name is not None:
        _running[str(name)] = work
    return _Handle(work, finish, None if name is None else str(name))


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

def _allreduce_async_(tensors, op, prescale_factor, postscale_factor, name, single, call="allreduce"):
    return _start(call, name,
                  lambda: _C.allreduce_async_(list(tensors), op, float(prescale_factor), float(postscale_factor),
                                              _name(name)),
                  (lambda out: out[0]) if single else (lambda out: list(out)))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing ``tensor`` in place over all ranks; returns a handle."""
    _check_process_set(process_set, "allreduce_async_")
    op = _op_of(op, average, "allreduce_async_")
    return _allreduce_async_([tensor], op, prescale_factor, postscale_factor, name, True)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing a copy of ``tensor``; synchronize() returns the result."""
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces ``tensor`` in place over all ranks and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, prescale, postscale, name):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return synchronize(_allreduce_async_([tensor.detach().clone()], op, prescale, postscale, name, True))

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (Sum, Average):
            raise RuntimeError(f"allreduce: no gradient through op {_OPS[ctx.op]} (Sum and Average have one)")
        out = synchronize(_allreduce_async_([grad.detach().clone()], ctx.op, ctx.prescale, ctx.postscale, None, True))
        return out, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of ``tensor`` over all ranks (a new tensor; differentiable
    for Sum and Average). ``compression`` may send it in 16 bits."""
    _check_process_set(process_set, "allreduce")
    op = _op_of(op, average, "allreduce")
    compressed, ctx = compression.compress(tensor)
    summed = _AllreduceFunction.apply(compressed, op, float(prescale_factor), float(postscale_factor), name)
    return compression.decompress(summed, ctx)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    _check_process_set(process_set, "grouped_allreduce_async_")
    op = _op_of(op, average, "grouped_allreduce_async_")
    return _allreduce_async_(tensors, op, prescale_factor, postscale_factor, name, False)


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
    def forward(ctx, op, prescale, postscale, name, *tensors):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return tuple(synchronize(_allreduce_async_([t.detach().clone() for t in tensors], op, prescale, postscale,
                                                   name, False)))

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (Sum, Average):
            raise RuntimeError(f"grouped_allreduce: no gradient through op {_OPS[ctx.op]} (Sum and Average have one)")
        out = synchronize(_allreduce_async_([g.detach().clone() for g in grads], ctx.op, ctx.prescale, ctx.postscale,
                                            None, False))
        return (None, None, None, None, *out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Returns the reductions of ``tensors`` (new tensors), sent in one message;
    differentiable for Sum and Average, as allreduce is."""
    _check_process_set(process_set, "grouped_allreduce")
    op = _op_of(op, average, "grouped_allreduce")
    packed = [compression.compress(t) for t in tensors]
    out = _GroupedAllreduceFunction.apply(op, float(prescale_factor), float(postscale_factor), name,
                                          *[t for t, _ in packed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(out, packed)]


# -- allgather, broadcast, alltoall, reducescatter --------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    _check_process_set(process_set, "allgather_async")
    return _start("allgather", name, lambda: _C.allgather_async(tensor, _name(name)), lambda out: out[0])


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.rows = tensor.shape[0]
        return synchronize(allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad):
        summed = synchronize(_allreduce_async_([grad.detach().clone()], Sum, 1.0, 1.0, None, True))
        rows = synchronize(allgather_async(torch.tensor([ctx.rows])))
        start = int(rows[:_C.rank()].sum())
        return summed.narrow(0, start, ctx.rows), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension, in rank
    order (the first dimension may differ across ranks). Differentiable."""
    _check_process_set(process_set, "allgather")
    return _AllgatherFunction.apply(tensor, name)


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

    def __init__(self, like, indices, values, op):
        super().__init__([indices, values])
        self._like, self._op = like, op

    def _finish(self, outputs):
        indices, values = outputs
        if self._op == Average:
            values = values / _C.size()
        return torch.sparse_coo_tensor(indices.t(), values, self._like.size())

    def __call__(self):
        return synchronize(self)


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Reduces a sparse COO tensor as Horovod does: every rank's indices and
    values are gathered, so the result (uncoalesced) holds every rank's
    entries, the values divided by size() for Average. Returns a handle to
    call (as Horovod's) or to synchronize()."""
    _check_process_set(process_set, "sparse_allreduce_async")
    if not tensor.is_sparse:
        raise ValueError(f"sparse_allreduce_async: a sparse COO tensor, not a {tensor.layout} one")
    indices = allgather_async(tensor._indices().t().contiguous(), None if name is None else f"{name}.indices")
    values = allgather_async(tensor._values(), None if name is None else f"{name}.values")
    return _SparseHandle(tensor, indices, values, op)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's ``tensor`` into every rank's, in place."""
    _check_process_set(process_set, "broadcast_async_")
    return _start("broadcast", name, lambda: _C.broadcast_async_([tensor], int(root_rank), _name(name)),
                  lambda out: out[0])


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies root_rank's ``tensor`` into every rank's, in place, and returns it."""
    with torch.no_grad():
        return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad):
        summed = synchronize(_allreduce_async_([grad.detach().clone()], Average, 1.0, 1.0, None, True))
        return (summed if _C.rank() == ctx.root_rank else summed.zero_()), None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's ``tensor`` on every rank (a new tensor; differentiable)."""
    _check_process_set(process_set, "broadcast")
    return _BroadcastFunction.apply(tensor, int(root_rank), name)


def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _check_process_set(process_set, "alltoall_async")
    return _start("alltoall", name, lambda: _C.alltoall_async(tensor, _splits_list(splits), _name(name)),
                  lambda out: (out[0], out[1]))


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name))
        ctx.received_splits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad, *unused):
        # Each row's gradient goes back to the rank that sent it.
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received_splits))
        return back, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[r]`` rows of ``tensor`` (in order) to rank r and returns
    the rows every rank sent here, in rank order; with ``splits`` also how
    many came from each (int32), as Horovod does. Without splits the rows
    divide evenly over the ranks. Differentiable: the gradient of each row
    goes back to its sender."""
    _check_process_set(process_set, "alltoall")
    return _AlltoallFunction.apply(tensor, splits, name)


def _share_of(reduced, rows):
    """This rank's rows of a reduction: the first ranks take one more row
    when the first dimension does not divide evenly, as in Horovod."""
    n, r = _C.size(), _C.rank()
    share, extra = divmod(rows, n)
    return reduced.narrow(0, r * share + min(r, extra), share + (1 if r < extra else 0))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing ``tensor`` over all ranks; synchronize() returns this
    rank's share of the first dimension. Sum and Average only, as in
    Horovod (HorovodInternalError otherwise, and for a rank-zero tensor)."""
    _check_process_set(process_set, "reducescatter_async")
    if op not in (Sum, Average):
        raise _C.HorovodInternalError(f"reducescatter: op must be Sum or Average, as in Horovod; got {_OPS.get(op, op)}")
    if tensor.dim() == 0:
        raise _C.HorovodInternalError("reducescatter: a rank-zero tensor has no first dimension to scatter")
    rows = tensor.shape[0]
    return _start("reducescatter", name,
                  lambda: _C.allreduce_async_([tensor.detach().clone()], op, float(prescale_factor),
                                              float(postscale_factor), _name(name)),
                  lambda out: _share_of(out[0], rows))


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.scale = (_C.size() if op == Sum else 1) * prescale * postscale
        return synchronize(reducescatter_async(tensor, name, op, global_process_set, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        # Horovod's rule: every rank's share gathered back, times size()
        # for Sum and the scale factors (not divided by size() for Average).
        return synchronize(allgather_async(grad.contiguous() * ctx.scale)), None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over all ranks and returns this rank's share of the
    first dimension (the first ranks take one more row when it does not
    divide evenly), as Horovod does. Differentiable, with Horovod's gradient."""
    _check_process_set(process_set, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    out = _ReducescatterFunction.apply(compressed, name, op, float(prescale_factor), float(postscale_factor))
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
    """Returns root_rank's ``obj`` (any picklable object) on every rank."""
    _check_process_set(process_set, "broadcast_object")
    payload = _to_bytes(obj) if _C.rank() == root_rank else torch.empty(0, dtype=torch.uint8)
    length = broadcast_(torch.tensor([payload.numel()], dtype=torch.int64), root_rank, name)
    if _C.rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name)
    return obj if _C.rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns every rank's ``obj`` (any picklable object), as a list in rank order."""
    _check_process_set(process_set, "allgather_object")
    payload = _to_bytes(obj)
    lengths = synchronize(allgather_async(torch.tensor([payload.numel()], dtype=torch.int64), name))
    gathered = synchronize(allgather_async(payload, name)).numpy().tobytes()
    out, start = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(gathered[start:start + n]))
        start += n
    return out


def barrier(process_set=global_process_set):
    """Returns once every rank has called it."""
    _check_process_set(process_set, "barrier")
    _C.barrier()


def join(device=-1):
    """This rank has no more data: until every rank has joined, it takes part
    in the others' allreduce calls and DistributedOptimizer steps with zeros
    (Average still divides by size(), as in Horovod). Returns the rank that
    joined last."""
    return _C.join()
