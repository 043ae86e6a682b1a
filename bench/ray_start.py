"""What starting a 2-worker job costs on Ray against `tandem launch`:
the wall time of DataParallelTrainer(...).fit() with tandem.ray's backend
for a loop of one training step (tests/python/train_mlp.py --steps 1), on
a local Ray started once before (its own start is not counted, as a
cluster's is not), against `tandem launch --workers 2` of the same
program, and against Ray Train's own cost (no backend, an empty loop).
Interleaved, best of REPEATS. Goal (issue 53): at most 2 s more.
Usage: PYTHONPATH=build/python .venv/bin/python bench/ray_start.py [build dir] [repeats]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from tandem.ray import TandemConfig

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
work = tempfile.mkdtemp(prefix="tandem-ray-start-")


def loop(config):
    sys.path.insert(0, config["tests"])
    import train_mlp

    sys.argv = ["train_mlp.py", "--out", config["out"], "--steps", "1"]
    train_mlp.main()


def empty_loop(config):
    pass


def ray_empty(i):
    """Ray Train's own cost: the same trainer with no backend and a loop that does nothing."""
    DataParallelTrainer(empty_loop, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(storage_path=f"{work}/storage", name=f"empty-{i}")).fit()


def ray_job(i):
    DataParallelTrainer(loop, train_loop_config={"tests": tests, "out": f"{work}/ray-{i}"},
                        backend_config=TandemConfig(), scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(storage_path=f"{work}/storage", name=f"start-{i}")).fit()


def launch_job(i):
    subprocess.run([f"{build}/tandem", "launch", "--workers", "2", "--", sys.executable,
                    f"{tests}/train_mlp.py", "--out", f"{work}/launch-{i}", "--steps", "1"],
                   check=True, capture_output=True)


start = time.time()
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
ray_init = time.time() - start
best = {"launch": float("inf"), "ray": float("inf"), "ray_empty": float("inf")}
try:
    for i in range(repeats):
        for name, job in (("launch", launch_job), ("ray", ray_job), ("ray_empty", ray_empty)):
            start = time.time()
            job(i)
            best[name] = min(best[name], time.time() - start)
finally:
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
print(f"machine: {cpu}, {os.cpu_count()} cores; best of {repeats}, seconds from the call to its return")
print(f"ray.init (once, not counted): {ray_init:.2f} s")
print(f"   launch: {best['launch']:5.2f} s  (tandem launch --workers 2 -- python train_mlp.py --steps 1)")
print(f"      ray: {best['ray']:5.2f} s  ({best['ray'] - best['launch']:+.2f} s against tandem launch)")
print(f"ray empty: {best['ray_empty']:5.2f} s  (Ray Train alone: no backend, a loop that does nothing)")
