"""Ray Train V2 runs a tandem.torch loop through tandem.ray.TandemConfig, on
a local Ray (ray.init(num_cpus=2), started here and shut down on exit): the
Horovod-style loop of train_mlp.py on 2 Ray workers ends on the same
parameters on both, and on those of one plain PyTorch process trained on
the combined batch (within 1e-5, the summation order aside). Then the same
loop in ps-sync mode, with its parameter server a Ray actor
(TandemConfig(num_servers=1)), ends there too. V2's own
trainer is used, and building it warns of nothing deprecated. Without
ray, `import tandem.ray` raises an ImportError naming the extra.
  ray_backend.py"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch

work = tempfile.mkdtemp(prefix="tandem-ray-")
atexit.register(shutil.rmtree, work, ignore_errors=True)
tests = os.path.dirname(os.path.abspath(__file__))
tandem_binary = sys.argv[1]  # the build's `tandem`, for the server actor

# Without ray: an ImportError that says what to install.
hidden = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None; import tandem.ray"],
                        capture_output=True, text=True)
assert hidden.returncode != 0 and "pip install 'tandem[ray]'" in hidden.stderr, hidden.stderr

import ray  # noqa: E402
from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer  # noqa: E402

from tandem.ray import TandemConfig  # noqa: E402


def loop(config):
    sys.path.insert(0, config["tests"])
    import train_mlp

    sys.argv = ["train_mlp.py", "--out", config["out"], "--mode", config["mode"]]
    train_mlp.main()


def trainer(mode, backend):
    return DataParallelTrainer(
        loop, train_loop_config={"tests": tests, "out": f"{work}/{mode}", "mode": mode}, backend_config=backend,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=f"{work}/ray-storage", name=f"tandem-{mode}"))


ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True,
         runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
try:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        allreduce = trainer("allreduce", TandemConfig())  # built with V2's own API: nothing deprecated
    allreduce.fit()
    # The two workers take Ray's 2 CPUs; the server, mostly waiting on them, asks for none.
    trainer("ps-sync", TandemConfig(num_servers=1, server_cpus=0, server_out=f"{work}/ps-out",
                                    tandem=tandem_binary)).fit()
finally:
    ray.shutdown()

subprocess.run([sys.executable, f"{tests}/train_mlp.py", "--out", f"{work}/plain", "--plain"], check=True)
plain = torch.load(f"{work}/plain/rank0.pt")
for mode in ("allreduce", "ps-sync"):
    r0, r1 = (torch.load(f"{work}/{mode}/rank{r}.pt") for r in (0, 1))
    for name in r0:
        assert torch.equal(r0[name], r1[name]), f"{mode} {name}: the two Ray workers' replicas differ"
        rel = ((r0[name] - plain[name]).norm() / plain[name].norm()).item()
        assert rel < 1e-5, f"{mode} {name}: 2 Ray workers vs one process on the combined batch: {rel:.2e} apart"
summary = f"{work}/ps-out/ps/ps-0/summary.json"
assert os.path.exists(summary), f"the Ray actor's server wrote no {summary}"
print("equal: 2 Ray workers (tandem.ray.TandemConfig, Ray Train V2), all-reduce and ps-sync with a server "
      "actor, ~ 1 process on the combined batch (1e-5)")
