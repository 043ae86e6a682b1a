#!/usr/bin/env python3
"""Plots of the scale-out lab's seed scenarios (docs/results/lab.md).

  plot_lab.py resnet110 RESULTS.json OUT.png
      aggregate steps/s against workers for each layout, measured in the
      lab, beside the comm-bound optimum and N times one worker.
  plot_lab.py inception RESULTS.json PLAN.json OUT.png
      images/s against GPUs: the users' report, the planner's tf1-ps model
      of it, Tandem's lab points and the planner's predictions.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

STYLE = {"users: 1 PS": ("tab:red", "o"), "Tandem: PS on every host": ("tab:blue", "s"),
         "Tandem: all-reduce": ("tab:green", "^")}


def resnet110(results, out):
    rows = json.load(open(results))
    one = next(r for r in rows if r["layout"] == "one worker")
    one_steps = one["measured_samples_per_sec"] / 128
    fig, ax = plt.subplots(figsize=(8, 5.5))
    top = 0
    for label, (color, marker) in STYLE.items():
        pts = sorted((r["workers"], r["measured_samples_per_sec"] / 128, r["optimum_samples_per_sec"] / 128)
                     for r in rows if r["layout"] == label and r["dilation"] == 1)
        if not pts:
            continue
        xs = [1] + [p[0] for p in pts]
        ax.plot(xs, [one_steps] + [p[1] for p in pts], color=color, marker=marker, label=f"{label} (lab)")
        ax.plot(xs, [one_steps] + [p[2] for p in pts], color=color, linestyle="--", alpha=0.6,
                label=f"{label}: comm-bound optimum")
        top = max(top, max(xs))
    ax.plot([1, top], [one_steps, top * one_steps], color="gray", linestyle=":", label="N x one worker")
    for r in rows:
        if r["dilation"] != 1:
            ax.plot([r["workers"]], [r["measured_samples_per_sec"] / 128], color="tab:red", marker="o",
                    markerfacecolor="none", markersize=11, linestyle="none",
                    label=f"{r['layout']} (time dilation check)")
    ax.axhline(3.0, color="black", linewidth=0.8, alpha=0.5)
    ax.text(1.05, 3.15, "users' report: ~3 steps/s at any worker count", fontsize=8)
    ax.set_xlabel("workers (2 per host, 1 Gbit/s host links)")
    ax.set_ylabel("aggregate training steps/s (batch 128 per worker)")
    ax.set_title("ResNet-110 on emulated TITAN X GPUs (330 ms/step): async PS vs Tandem's layouts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def inception(results, plan, out):
    rows = json.load(open(results))
    p = json.load(open(plan))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    gpus = p["users"]["gpus"]
    ax.plot(gpus, p["users"]["images_per_sec"], color="tab:red", marker="o", label="users' report (TF1 PS)")
    ax.fill_between(gpus, p["tf1_ps"]["images_per_sec"], p["tf1_ps_greedy"]["images_per_sec"], color="tab:red",
                    alpha=0.12, label="planner: tf1-ps model, between its two variable placements")
    ax.plot(gpus, p["tf1_ps"]["images_per_sec"], color="tab:red", linestyle="--", alpha=0.7,
            label="tf1-ps, round-robin placement")
    ax.plot(gpus, p["tf1_ps_greedy"]["images_per_sec"], color="tab:red", linestyle="-.", alpha=0.7,
            label="tf1-ps, greedy placement")
    ax.plot(gpus, [p["single_images_per_sec"] * g for g in gpus], color="gray", linestyle=":", linewidth=3,
            label="N x one K80 (30.5 images/s), under Tandem's prediction")
    ax.plot(p["tandem"]["gpus"], p["tandem"]["images_per_sec"], color="tab:blue", linestyle="--",
            label=f"planner: Tandem, {p['tandem']['layout']}")
    for dilation, marker in zip(sorted({r["dilation"] for r in rows}), ["s", "D", "^"]):
        lab = sorted((r["workers"], r["measured_samples_per_sec"]) for r in rows if r["dilation"] == dilation)
        ax.plot([x for x, _ in lab], [y for _, y in lab], color="tab:blue", marker=marker, linestyle="none",
                markersize=8, markerfacecolor="none" if dilation != 2 else "tab:blue",
                label=f"Tandem in the lab (2 workers/host, dilation {dilation:g})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("GPUs (K80, batch 64 each)")
    ax.set_ylabel("images/s")
    ax.set_title("Synchronous Inception v3, 25 Gbit/s host links")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "resnet110":
        resnet110(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "inception":
        inception(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
