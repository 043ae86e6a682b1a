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

Parameter servers run as Ray actors: ``TandemConfig(num_servers=K)``
starts K of them, spread over the nodes, each running a ``tandem train``
server; the loop then uses ``DistributedOptimizer(..., mode="ps-sync")``
(or ``ps-async``, ``ps-ssp``) as under ``tandem launch --ps K``. The
servers count as the last K ranks of the job: the workers see
``WORLD_SIZE`` as N + K and ``TANDEM_PS_TASKS`` as K, and ``td.size()`` is
still N. They end when the workers do, and write their summaries under
``server_out``.
"""
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

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


def _set_environment(address, port, servers):
    from tandem import _C

    context = ray.train.get_context()
    _C.export_variables({
        "MASTER_ADDR": address,
        "MASTER_PORT": str(port),
        "RANK": str(context.get_world_rank()),
        # The servers are the job's last ranks.
        "WORLD_SIZE": str(context.get_world_size() + servers),
        "TANDEM_PS_TASKS": str(servers) if servers else None,
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


def _tandem_executable(given):
    """The ``tandem`` program: as given, else beside this Python (where
    ``pip install`` puts it), else on PATH."""
    if given:
        return given
    beside = os.path.join(os.path.dirname(sys.executable), "tandem")
    found = beside if os.access(beside, os.X_OK) else shutil.which("tandem")
    if not found:
        raise RuntimeError("tandem.ray: no `tandem` executable beside this Python or on PATH for the parameter "
                           "servers; pip install tandem, or pass TandemConfig(tandem=PATH)")
    return found


class _ParameterServer:
    """A Ray actor that runs one ``tandem train`` server process and
    answers with its exit status."""

    def start(self, argv, variables):
        from tandem import _C

        variables["TANDEM_HOST"] = ray.util.get_node_ip_address()
        _C.export_variables(variables)
        self.process = subprocess.Popen(argv)
        return self.process.pid

    def wait(self, timeout):
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


class _TandemBackend(Backend):
    def on_start(self, worker_group, backend_config):
        address, port = worker_group.execute_single(0, _address_and_port)
        servers = backend_config.num_servers
        workers = len(worker_group)
        self.servers = []
        if servers:
            program = _tandem_executable(backend_config.tandem)
            actor = ray.remote(num_cpus=backend_config.server_cpus)(_ParameterServer)
            for index in range(servers):
                server = actor.options(scheduling_strategy="SPREAD").remote()
                argv = [program, "train", "--ps", str(servers), "--coordinator", f"{address}:{port}",
                        "--out", backend_config.server_out, *backend_config.server_args]
                variables = {"RANK": str(workers + index), "WORLD_SIZE": str(workers + servers),
                             "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "TORCHELASTIC_USE_AGENT_STORE": None}
                self.servers.append(server)
                try:
                    ray.get(server.start.remote(argv, variables), timeout=backend_config.server_timeout_s)
                except ray.exceptions.GetTimeoutError:
                    raise RuntimeError(
                        f"tandem.ray: parameter server {index} did not start within "
                        f"{backend_config.server_timeout_s:g} s: the cluster may have no {backend_config.server_cpus:g} "
                        "CPU(s) free for it beside the workers (TandemConfig(server_cpus=...))") from None
        worker_group.execute(_set_environment, address, port, servers)

    def on_shutdown(self, worker_group, backend_config):
        worker_group.execute(_shut_down)
        statuses = ray.get([s.wait.remote(backend_config.server_timeout_s) for s in self.servers])
        for server in self.servers:
            ray.kill(server)
        failed = [(i, status) for i, status in enumerate(statuses) if status != 0]
        if failed:
            raise RuntimeError("tandem.ray: parameter server(s) " + ", ".join(
                f"ps {i} ({'still running after the workers ended; killed' if status is None else f'exit {status}'})"
                for i, status in failed))


@dataclass
class TandemConfig(BackendConfig):
    """Ray Train's backend configuration for Tandem. What the job trains
    with is ``tandem.torch.init()``'s and ``DistributedOptimizer``'s
    arguments, in the loop, as under tandem launch. ``num_servers``
    parameter servers run as Ray actors of ``server_cpus`` CPUs each,
    writing under ``server_out``, with ``server_args`` added to their
    ``tandem train`` (``tandem``: its path, else found beside Python or on
    PATH); each must start, and end after the workers, within
    ``server_timeout_s``."""

    num_servers: int = 0
    server_cpus: float = 1
    server_out: str = "runs/ray-ps"
    server_args: list = field(default_factory=list)
    tandem: str = ""
    server_timeout_s: float = 60

    def __post_init__(self):
        if not isinstance(self.num_servers, int) or self.num_servers < 0:
            raise ValueError(f"TandemConfig: num_servers must be a count >= 0, got {self.num_servers!r}")

    @property
    def backend_cls(self):
        return _TandemBackend


__all__ = ["TandemConfig"]
