#!/usr/bin/env python3
"""Test accuracy against bytes on the wire, from bench/diloco.sh's RESULTS
files (docs/results.md, "DiLoCo").

  plot_diloco.py OUT.png LABEL=RESULTS.json [LABEL=RESULTS.json ...]

Each file is one DiLoCo setting; its sync runs are drawn once. A point is
the mean over seeds, its bar the lowest and highest seed.
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def by_mode(runs):
    modes = {}
    for r in runs:
        modes.setdefault(r["mode"], []).append(r)
    return modes


def point(rows):
    acc = [r["test_accuracy"] for r in rows]
    mean = statistics.mean(acc)
    return statistics.mean(r["bytes"] for r in rows) / 1e6, mean, mean - min(acc), max(acc) - mean


def main(out, series):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    sync_drawn = False
    for label, path in series:
        modes = by_mode(json.load(open(path))["runs"])
        if "sync" in modes and not sync_drawn:
            x, y, lo, hi = point(modes.pop("sync"))
            ax.errorbar([x], [y], yerr=[[lo], [hi]], fmt="s", color="black", capsize=4, label="sync (every step)")
            ax.axhline(y - 0.01, color="gray", linestyle=":", label="sync - 1 point")
            sync_drawn = True
        modes.pop("sync", None)
        pts = sorted((point(rows), m) for m, rows in modes.items())
        xs = [p[0][0] for p in pts]
        ax.errorbar(xs, [p[0][1] for p in pts], yerr=[[p[0][2] for p in pts], [p[0][3] for p in pts]], marker="o",
                    capsize=4, label=f"DiLoCo, {label}")
        for (x, y, _, _), m in pts:
            ax.annotate(f"H={m[1:]}", (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("bytes through the parameter server (MB, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Fashion-MNIST cnn, 1 PS + 8 workers, 1 epoch: accuracy against bytes (5 seeds, min-max)")
    ax.title.set_fontsize(10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], [tuple(a.split("=", 1)) for a in sys.argv[2:]])
