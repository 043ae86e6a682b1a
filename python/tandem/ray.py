"""Tandem as a Ray Train backend: ``DataParallelTrainer`` runs a
``tandem.torch`` loop (Horovod's API) on Ray's workers.

    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from tandem.ray import TandemConfig

    def loop(config):
        import tandem.torch as td
        td.init()
        ...  # the Horovod way: DistributedOptimizer, broadcast_parameters

    DataParallelTrainer(loop, backend_config=TandemConfig(),
                        scaling_config=ScalingConfig(num_workers=4)).fit()

Before the loop starts, the backend gives every worker what torchrun gives
its processes: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE`` and ``NODE_RANK`` from Ray's train context, and
``MASTER_ADDR`` and ``MASTER_PORT``, a free port on the rank-0 worker's
node, where ``td.init()`` on rank 0 serves the coordinator. Ray Train V2
(the default in ray 2.60) is what it is tested with.
"""
from dataclasses import dataclass

try:
    import ray
    from ray.train.backend import Backend, BackendConfig
except ImportError as e:  # pragma: no cover - exercised without ray installed
    raise ImportError(
        "tandem.ray needs Ray Train: pip install 'tandem[ray]' (or pip install 'ray[train]==2.60.0')"
    ) from e


def _address_and_port():
    import socket

    address = ray.util.get_node_ip_address()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return address, s.getsockname()[1]


def _set_environment(address, port):
    from tandem import _C

    context = ray.train.get_context()
    _C.export_variables({
        "MASTER_ADDR": address,
        "MASTER_PORT": str(port),
        "RANK": str(context.get_world_rank()),
        "WORLD_SIZE": str(context.get_world_size()),
        "LOCAL_RANK": str(context.get_local_rank()),
        "LOCAL_WORLD_SIZE": str(context.get_local_world_size()),
        "NODE_RANK": str(context.get_node_rank()),
        # Not torchrun's agent store: the coordinator takes MASTER_PORT itself.
        "TORCHELASTIC_USE_AGENT_STORE": None,
    })


def _shut_down():
    import sys

    torch_api = sys.modules.get("tandem.torch")
    if torch_api is not None and torch_api.is_initialized():
        torch_api.shutdown()


class _TandemBackend(Backend):
    def on_start(self, worker_group, backend_config):
        address, port = worker_group.execute_single(0, _address_and_port)
        worker_group.execute(_set_environment, address, port)

    def on_shutdown(self, worker_group, backend_config):
        worker_group.execute(_shut_down)


@dataclass
class TandemConfig(BackendConfig):
    """Ray Train's backend configuration for Tandem. It has no fields: what
    the job trains with is ``tandem.torch.init()``'s and
    ``DistributedOptimizer``'s arguments, in the loop, as under tandem launch."""

    @property
    def backend_cls(self):
        return _TandemBackend


__all__ = ["TandemConfig"]
