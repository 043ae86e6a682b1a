"""TensorFlow side of bench/peer_frameworks.sh: the 256-4096-4096-256 MLP
(Linear+ReLU, Linear+ReLU, Linear; softmax cross entropy over 256 classes;
Adam lr 1e-4, eps 1e-8; batch 128 of synthetic data), the layers and
initialisation of Tandem's `mlp` model (torch.nn.Linear's defaults).

  standalone  TF2: a Keras model and a tf.function training step, threads
              set with tf.config.threading (intra and inter op).
  ps-job      TF1-era async between-graph replication: starts 1 PS and N
              worker processes of `task` on 127.0.0.1 and waits for them.
  task        one such process: tf.compat.v1 graph mode, a ClusterSpec,
              tf.compat.v1.train.Server, replica_device_setter and
              MonitoredTrainingSession with a StopAtStepHook on the global
              step (the job's total, shared by all workers).

Every mode writes one JSON result: aggregate worker steps/s (optimizer
updates per second, each of batch 128) over the steps after warm-up.
"""
import argparse
import ctypes
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

WIDTHS = [256, 4096, 4096, 256]
CLASSES = 256
BATCH = 128
LR = 1e-4
POOL = 1024  # synthetic samples cycled through (8 batches), made once


def synthetic(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((POOL, WIDTHS[0]), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=POOL).astype(np.int64)
    return x, y


def write_result(path, **fields):
    with open(path, "w") as f:
        json.dump(fields, f)


# ---------------------------------------------------------------- standalone

def standalone(a):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    keras = tf.keras
    tf.random.set_seed(a.seed)
    layers = [keras.Input((WIDTHS[0],))]
    for i in range(1, len(WIDTHS)):
        bound = 1.0 / math.sqrt(WIDTHS[i - 1])  # torch.nn.Linear's init
        layers.append(keras.layers.Dense(
            WIDTHS[i], activation="relu" if i < len(WIDTHS) - 1 else None,
            kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
            bias_initializer=keras.initializers.RandomUniform(-bound, bound)))
    model = keras.Sequential(layers)
    optimizer = keras.optimizers.Adam(LR, beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = synthetic(a.seed)
    data = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH).prefetch(4))

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(a.warmup):
        float(step(*next(data)))
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = float(step(*next(data)))  # read every step, as Tandem does
    seconds = time.perf_counter() - start
    write_result(a.out, updates_per_s=a.steps / seconds, steps=a.steps, seconds=seconds,
                 threads=a.threads, final_loss=loss, tf_version=tf.__version__,
                 api="TF2 Keras model + tf.function step")


# ------------------------------------------------------------------- ps job

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    # The tasks go too if this driver is killed (e.g. by `timeout`).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def ps_job(a):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    os.makedirs(a.logs, exist_ok=True)
    cluster = {"ps": [f"127.0.0.1:{free_port()}"],
               "worker": [f"127.0.0.1:{free_port()}" for _ in range(a.workers)]}
    ready = os.path.join(a.logs, "chief_ready")
    if os.path.exists(ready):
        os.remove(ready)
    common = [sys.executable, os.path.abspath(__file__), "task", "--cluster", json.dumps(cluster),
              "--warmup", str(a.warmup), "--steps", str(a.steps),
              "--seed", str(a.seed), "--out", a.out, "--ready-file", ready]
    procs = {}
    try:
        for job, count in (("ps", 1), ("worker", a.workers)):
            for i in range(count):
                log = open(os.path.join(a.logs, f"{job}{i}.log"), "w")
                threads = (a.ps_threads or a.threads) if job == "ps" else a.threads
                procs[(job, i)] = subprocess.Popen(common + ["--job", job, "--index", str(i), "--threads", str(threads)],
                                                   stdout=log,
                                                   stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + a.timeout
        failed = []
        for i in range(a.workers):
            p = procs[("worker", i)]
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            if rc != 0:
                failed.append(f"worker {i} exited {rc}")
        if failed:
            sys.exit("TF PS job failed: " + "; ".join(failed) + f" (logs in {a.logs})")
    except subprocess.TimeoutExpired:
        sys.exit(f"TF PS job timed out after {a.timeout:.0f} s (logs in {a.logs})")
    finally:
        # The PS serves forever (server.join()), as in TF1: stop it, and any
        # worker still running.
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        for p in procs.values():
            p.wait()


def task(a):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    cluster_dict = json.loads(a.cluster)
    workers = len(cluster_dict["worker"])
    cluster = v1.train.ClusterSpec(cluster_dict)
    threads = dict(intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=a.threads)
    if a.job == "ps":
        server = v1.train.Server(cluster, job_name="ps", task_index=a.index, config=v1.ConfigProto(**threads))
        server.join()
        return
    # Each worker sees only the PS and itself, as TF1 guides recommended.
    config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{a.index}"], **threads)
    server = v1.train.Server(cluster, job_name="worker", task_index=a.index, config=config)
    chief = a.index == 0
    total = workers * (a.warmup + a.steps)  # the job's global steps
    x, y = synthetic(a.seed + a.index)
    with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{a.index}", cluster=cluster)):
        global_step = v1.train.get_or_create_global_step()
        # Start-up barrier: every worker is connected before anyone trains.
        joined = v1.get_variable("peer_joined", shape=[], dtype=tf.int32, initializer=v1.zeros_initializer(),
                                 trainable=False)
        join = v1.assign_add(joined, 1)
        data = v1.data.make_one_shot_iterator(
            tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH).prefetch(4))
        h, labels = data.get_next()
        for i in range(1, len(WIDTHS)):
            bound = 1.0 / math.sqrt(WIDTHS[i - 1])  # torch.nn.Linear's init
            init = v1.random_uniform_initializer(-bound, bound, seed=a.seed + i)
            w = v1.get_variable(f"dense{i}/kernel", [WIDTHS[i - 1], WIDTHS[i]], initializer=init)
            b = v1.get_variable(f"dense{i}/bias", [WIDTHS[i]], initializer=init)
            h = tf.nn.bias_add(tf.matmul(h, w), b)
            if i < len(WIDTHS) - 1:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))
        train_op = v1.train.AdamOptimizer(LR, beta1=0.9, beta2=0.999, epsilon=1e-8).minimize(
            loss, global_step=global_step)
    off_ps = [v.name for v in v1.global_variables() if not v.device.startswith("/job:ps")]
    if off_ps:
        sys.exit(f"variables not on the PS: {off_ps}")
    if not chief:
        # Without this the worker's first readiness check usually comes before
        # the chief's initialisation and it then sleeps 30 s (SessionManager).
        deadline = time.monotonic() + 600
        while not os.path.exists(a.ready_file):
            if time.monotonic() > deadline:
                sys.exit("chief never became ready")
            time.sleep(0.05)
    hooks = [v1.train.StopAtStepHook(last_step=total)]
    with v1.train.MonitoredTrainingSession(master=server.target, is_chief=chief, hooks=hooks, config=config,
                                           checkpoint_dir=None, save_checkpoint_secs=None,
                                           save_summaries_steps=None, save_summaries_secs=None,
                                           log_step_count_steps=0) as sess:
        if chief:
            open(a.ready_file, "w").close()
        sess.run(join)
        while sess.run(joined) < workers:
            time.sleep(0.01)
        own = 0
        mark = None  # (global step, time) once this worker is past warm-up
        last = None
        while not sess.should_stop():
            _, loss_value, g = sess.run([train_op, loss, global_step])
            own += 1
            now = time.perf_counter()
            if own == a.warmup:
                mark = (g, now, own)
            last = (g, now, own)
    if chief:
        if mark is None or last[0] <= mark[0]:
            sys.exit(f"chief measured no steps after warm-up (own steps {own}); raise --steps")
        g0, t0, _ = mark
        g1, t1, own1 = last
        # The job's global steps per second as the chief saw them: every
        # worker's updates, each of one batch.
        write_result(a.out, updates_per_s=(g1 - g0) / (t1 - t0), global_steps=int(g1 - g0), seconds=t1 - t0,
                     chief_own_steps=own1 - a.warmup, threads=a.threads, workers=workers,
                     final_loss=float(loss_value), tf_version=tf.__version__,
                     api="tf.compat.v1 graph, replica_device_setter, MonitoredTrainingSession, async")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["standalone", "ps-job", "task"])
    p.add_argument("--threads", type=int, required=True, help="intra and inter op threads per (worker) process")
    p.add_argument("--warmup", type=int, default=5, help="steps per worker not timed")
    p.add_argument("--steps", type=int, default=30, help="timed steps per worker")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--workers", type=int, default=1, help="ps-job: worker processes")
    p.add_argument("--ps-threads", type=int, default=0, help="ps-job: the PS's threads (0: --threads)")
    p.add_argument("--logs", help="ps-job: directory for the tasks' logs")
    p.add_argument("--timeout", type=float, default=600, help="ps-job: seconds before giving up")
    p.add_argument("--cluster", help="task: ClusterSpec as JSON")
    p.add_argument("--job", choices=["ps", "worker"], help="task: job name")
    p.add_argument("--index", type=int, default=0, help="task: task index")
    p.add_argument("--ready-file", help="task: the chief creates it once its session is up")
    a = p.parse_args()
    {"standalone": standalone, "ps-job": ps_job, "task": task}[a.mode](a)


if __name__ == "__main__":
    main()
