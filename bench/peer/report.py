"""Helpers of bench/peer_frameworks.sh (standard library only).

  tandem-rate RUN_DIR OUT_JSON
      Tandem's aggregate worker steps/s after warm-up, from the chief's
      metrics.jsonl. The run logs every warm-up's worth of steps, so the
      first `train` line holds the warm-up and is dropped. Each later line is
      one interval: its global steps (the step difference to the line before)
      at its samples_per_sec (the job's samples over the chief's step time),
      so the interval took steps x samples_per_job_step / samples_per_sec
      seconds; the steps cancel out and
          samples/s = sum(d_step) / sum(d_step / samples_per_sec)
      per sample of steps, i.e. divided by the batch, is worker steps/s
      summed over workers (async PS: global steps/s; all-reduce: workers x
      synchronous steps/s).

  table OUT_DIR RESULTS_DIR
      Medians per configuration and framework, Tandem/TF and
      Tandem/PyTorch, as a markdown table on stdout and in OUT_DIR/peer.md.
"""
import glob
import json
import os
import statistics
import sys

# (key, label, frameworks measured); the order of the table.
FRAMEWORKS = ["tf", "tandem", "torch"]
NAMES = {"tf": "TensorFlow", "tandem": "Tandem", "torch": "PyTorch"}


def tandem_rate(run_dir, out_path):
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    train = [l for l in lines if l.get("type") == "train"]
    if len(train) < 2:
        sys.exit(f"{run_dir}: {len(train)} train line(s) in metrics.jsonl; no steps after warm-up to time")
    steps = seconds_per_sample = 0.0
    for before, line in zip(train, train[1:]):
        d = line["step"] - before["step"]
        steps += d
        seconds_per_sample += d / line["samples_per_sec"]
    samples_per_s = steps / seconds_per_sample
    batch = summary["batch_size_per_worker"]
    result = {"updates_per_s": samples_per_s / batch, "samples_per_s": samples_per_s,
              "global_steps_timed": steps, "global_step": summary["global_step"], "mode": summary["mode"],
              "workers": summary["workers"], "threads": summary.get("threads"),
              "local_processes": summary.get("local_processes"), "final_loss": summary.get("final_loss")}
    json.dump(result, open(out_path, "w"))


def table(out_dir, results_dir, configs_json):
    configs = json.loads(configs_json)
    results = {}
    for path in glob.glob(os.path.join(results_dir, "*.json")):
        r = json.load(open(path))
        results.setdefault((r["config"], r["framework"]), []).append(r)
    rows = ["| configuration | threads per process | TensorFlow | Tandem | PyTorch | Tandem/TF | Tandem/PyTorch |",
            "|---|---|---|---|---|---|---|"]
    for c in configs:
        med = {}
        cells = []
        for fw in FRAMEWORKS:
            if fw not in c["frameworks"]:
                cells.append("-")
                continue
            got = [r for r in results.get((c["key"], fw), []) if r.get("ok")]
            failed = c["rounds_run"] - len(got)
            if got:
                med[fw] = statistics.median(r["updates_per_s"] for r in got)
                cells.append(f"{med[fw]:.2f}" + (f" ({failed} failed)" if failed else ""))
            else:
                skipped = [r for r in results.get((c["key"], fw), []) if r.get("skipped")]
                cells.append("skipped" if skipped or c["rounds_run"] == 0 else "failed")
        ratio = lambda other: f"{med['tandem'] / med[other]:.2f}" if "tandem" in med and other in med else "-"
        rows.append(f"| {c['label']} | {c['threads']} | " + " | ".join(cells) + f" | {ratio('tf')} | {ratio('torch')} |")
    text = "\n".join(rows) + "\n"
    with open(os.path.join(out_dir, "peer.md"), "a") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"tandem-rate": tandem_rate, "table": table}[cmd](*args)
