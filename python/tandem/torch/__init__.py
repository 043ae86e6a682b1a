"""Tandem for PyTorch, with Horovod's vocabulary: a Horovod script moves over
by changing ``import horovod.torch as hvd`` to ``import tandem.torch as hvd``.

    import tandem.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

Run it under ``tandem launch --workers N -- python train.py`` (or torchrun,
mpirun, srun). Gradients are reduced in buckets by the same C++ code as
``tandem train``, overlapped with backward. With ``mode="ps-sync"``,
``"ps-async"`` or ``"ps-ssp"`` and ``tandem launch --ps K``, parameter servers
run the optimizer instead. docs/python.md lists what differs from Horovod.
"""
import atexit

import torch

from tandem import _build

if torch.__version__.split("+")[0] != _build.torch_version:
    raise ImportError(f"tandem was built against torch {_build.torch_version}, but this Python has torch "
                      f"{torch.__version__}: reinstall tandem in this environment (pip install "
                      f"--force-reinstall --no-deps /path/to/tandem)")

from tandem import _C  # noqa: E402  (after the version check: a mismatched LibTorch fails to load it)
from tandem.torch.compression import Compression, Compressor  # noqa: E402,F401
from tandem.torch.ops import *  # noqa: E402,F401,F403
from tandem.torch.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: E402,F401
from tandem.torch.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: E402,F401
                                       remove_process_set, _forget_process_sets)
from tandem.torch.optimizer import (DistributedOptimizer, broadcast_optimizer_state,  # noqa: E402,F401
                                    broadcast_parameters, finish_servers as _finish_servers)
from tandem.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402,F401
from tandem.torch import elastic  # noqa: E402,F401
from tandem.torch import _options  # noqa: E402
from tandem.torch._options import DEFAULTS  # noqa: E402

InputError = _C.InputError  # a ValueError
# Horovod's RuntimeError for a failed collective: PeerError (a dead or
# silent peer) and MismatchError (ranks that called it differently, also a
# ValueError) are both HorovodInternalError.
HorovodInternalError = _C.HorovodInternalError
PeerError = _C.PeerError
MismatchError = _C.MismatchError
HostsUpdatedInterrupt = elastic.HostsUpdatedInterrupt  # a commit's news: the members are changing


@_options.documented("rendezvous_timeout_s", "peer_timeout_s", "bucket_mb", "wire_dtype", "error_feedback",
                     "hierarchical")
def init(comm=None, process_sets=None, rendezvous_timeout_s=DEFAULTS["rendezvous_timeout_s"],
         peer_timeout_s=DEFAULTS["peer_timeout_s"], bucket_mb=DEFAULTS["bucket_mb"], wire_dtype=DEFAULTS["wire_dtype"],
         error_feedback=DEFAULTS["error_feedback"], hierarchical=DEFAULTS["hierarchical"]):
    """Joins the job (TF_CONFIG from tandem launch, or torchrun, mpirun, srun);
    alone when none is set. A second call is a no-op, as in Horovod; after
    shutdown() it joins again. bucket_mb 0 sizes DistributedOptimizer's
    gradient buckets from the model. wire_dtype "fp16" or "bf16" sends every
    gradient bucket and PS chunk in 16 bits (weights and optimizer state stay
    float32); error_feedback carries each value's rounding into its next
    send. hierarchical "auto" sums each host's workers over loopback first
    when the job spans hosts.

    ``process_sets``: a list of ProcessSet (or rank lists) to add, as
    add_process_set does, in the same order on every rank; "dynamic" (as
    Horovod's) is accepted, and needed by neither: sets may be added and
    removed at any time."""
    if comm is not None:
        raise ValueError("init: MPI communicators (comm=) are not supported by Tandem; it reads the job from "
                         "tandem launch, torchrun, mpirun or srun")
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(f"init: process_sets must be a list of ProcessSet or 'dynamic', not {process_sets!r}")
        process_sets = None
    if _C.is_initialized():
        return
    _C.init(rendezvous_timeout_s, peer_timeout_s, bucket_mb, wire_dtype, error_feedback, hierarchical)
    global_process_set.ranks = list(range(_C.size()))
    for i, process_set in enumerate(process_sets or []):
        try:
            add_process_set(process_set)
        except ValueError as e:
            raise ValueError(f"init: process_sets entry number {i}: {e}") from e


def shutdown():
    _finish_servers()
    _forget_process_sets()
    _C.shutdown()


def is_initialized():
    return _C.is_initialized()


def rank():
    return _C.rank()


def size():
    return _C.size()


def local_rank():
    return _C.local_rank()


def local_size():
    return _C.local_size()


def cross_rank():
    return _C.cross_rank()


def cross_size():
    return _C.cross_size()


def start_timeline(file_path, mark_cycles=False):
    """Records every collective and DistributedOptimizer bucket, from here
    on, as spans in `file_path` (Tandem's trace format: chrome://tracing or
    Perfetto). Rank 0 writes it, as Horovod's coordinator does; mark_cycles
    is ignored. ValueError before init()."""
    _C.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Writes the timeline and stops recording (nothing when none records)."""
    _C.stop_timeline()


# What this build has, answered truthfully: Tandem's collectives run on the
# Gloo inside LibTorch, on CPU tensors; no MPI, NCCL, oneCCL, DDL or ROCm.
def mpi_built(verbose=False):
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built(verbose=False):
    return True


def gloo_enabled():
    return True


def nccl_built(verbose=False):
    return False


def ccl_built(verbose=False):
    return False


def ddl_built(verbose=False):
    return False


def cuda_built(verbose=False):
    return False


def rocm_built(verbose=False):
    return False


def _shutdown_at_exit():
    # Here, before the interpreter finalises: the communication thread may
    # still release tensors a failed or unawaited collective held, and that
    # needs the interpreter (after finalisation it aborted the process).
    try:
        shutdown()
    except Exception as e:  # exiting anyway: a peer that left first is no reason to fail the exit
        import sys
        print(f"tandem: shutdown at exit: {e}", file=sys.stderr)


atexit.register(_shutdown_at_exit)
