#!/usr/bin/env python3
"""Test accuracy against training time in the lab, one panel per link
speed, from bench/lab_accuracy.sh's OUT/results.json
(docs/results/diloco.md, "Accuracy against training time in the lab").

  plot_lab_accuracy.py OUT.png RESULTS.json

A point is a mode's mean over seeds; its bars span the lowest and highest
seed, in time and in accuracy. A mode whose runs diverged is written on
the panel's floor with its mean accuracy.
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOOR = 0.74
STYLE = {"sync": ("s", "black", "sync"), "async": ("x", "tab:red", "async"),
         "dc": ("^", "tab:purple", "async + DC-ASGD (adaptive)"),
         "dcc": ("v", "tab:pink", "async + DC-ASGD (constant)"),
         "slrm": ("P", "tab:orange", "async, --staleness-lr on, momentum 0.6"),
         "h": ("o", "tab:blue", "DiLoCo"), "s": ("D", "tab:green", "streaming DiLoCo")}


def style(mode):
    if mode in STYLE:
        return STYLE[mode]
    marker, color, name = STYLE[mode[0]]
    return marker, color, f"{name} H={mode[1:]}"


def main(out, path):
    runs = json.load(open(path))["runs"]
    links = sorted({r["link_mbit_per_s"] for r in runs})
    fig, axes = plt.subplots(1, len(links), figsize=(6.5 * len(links), 5.5), squeeze=False)
    for ax, link in zip(axes[0], links):
        modes = {}
        for r in runs:
            if r["link_mbit_per_s"] == link:
                modes.setdefault(r["mode"], []).append(r)
        series = {}
        for mode, rows in sorted(modes.items(), key=lambda kv: (kv[0][0], int(kv[0][1:]) if kv[0][1:].isdigit() else 0)):
            marker, color, name = style(mode)
            acc = [r["test_accuracy"] for r in rows]
            walls = [r["wall_seconds"] for r in rows if r["wall_seconds"]]
            y = statistics.mean(acc)
            if not walls or y < FLOOR:
                x = statistics.mean(walls) if walls else 0
                ended = f"{len(walls)}/{len(rows)} ran to the end" if walls else "every run stopped, loss not finite"
                ax.plot([x], [FLOOR + 0.003], marker=marker, color=color, linestyle="none",
                        label=f"{name}: {y:.2f}, chance ({ended})")
                continue
            x = statistics.mean(walls)
            point = (x, y, x - min(walls), max(walls) - x, y - min(acc), max(acc) - y, mode)
            series.setdefault(mode if mode in STYLE else mode[0], []).append(point)
        for key, pts in series.items():
            marker, color, name = STYLE[key]
            if key not in ("sync", "async", "dc", "dcc", "slrm"):
                name = f"{name}, H = " + ", ".join(p[6][1:] for p in pts)
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], xerr=[[p[2] for p in pts], [p[3] for p in pts]],
                        yerr=[[p[4] for p in pts], [p[5] for p in pts]], fmt=marker, color=color, capsize=3,
                        linestyle="-" if len(pts) > 1 else "none", label=name)
            if len(pts) > 1:
                for p in pts:
                    ax.annotate(f"H={p[6][1:]}", (p[0], p[1]), textcoords="offset points", xytext=(5, 5), fontsize=7)
        ax.set_ylim(bottom=FLOOR)
        ax.set_xlim(left=0)
        ax.set_xlabel("the chief's training time (s)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{link:g} Mbit/s links")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Fashion-MNIST cnn in the lab: 8 hosts, a worker and a PS on each, 1 epoch "
                 f"({len({r['seed'] for r in runs})} seeds, min-max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
