#!/usr/bin/env python3
"""Test accuracy against bytes on the wire, from bench/diloco.sh's RESULTS
files (docs/results/diloco.md).

  plot_diloco.py [--title TEXT] [--floor ACC] OUT.png LABEL=RESULTS.json [LABEL=RESULTS.json ...]

Each file is one DiLoCo setting (modes hN, aN for async DiLoCo, sN for
streaming DiLoCo, each with an optional q8 or q4 for 8- or 4-bit pushes); its
sync, async and dc runs are drawn once, from the first file that has them.
A point is the mean over seeds, its bar the lowest and highest seed.
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


FLOOR = 0.74  # the plot's lowest accuracy (--floor); runs below it are marked on it
TITLE = "Fashion-MNIST cnn, 1 PS + 8 workers, 1 epoch: accuracy against bytes (5 seeds, min-max)"


def by_mode(runs):
    modes = {}
    for r in runs:
        modes.setdefault(r["mode"], []).append(r)
    return modes


def tag(mode):
    h, _, bits = mode[1:].partition("q")
    return f"H={h}" + (f" {bits}-bit" if bits else "")


def point(rows):
    acc = [r["test_accuracy"] for r in rows]
    mean = statistics.mean(acc)
    return statistics.mean(r["bytes"] for r in rows) / 1e6, mean, mean - min(acc), max(acc) - mean


def main(out, series, title=TITLE, floor=FLOOR):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    drawn = set()
    singles = {"sync": ("s", "black", "sync (every step)"), "async": ("x", "tab:red", "async, sync's rate"),
               "dc": ("^", "tab:purple", "async + DC-ASGD, sync's rate")}
    for label, path in series:
        modes = by_mode(json.load(open(path))["runs"])
        for mode, (marker, color, name) in singles.items():
            rows = modes.pop(mode, None)
            if rows is None or mode in drawn:
                continue
            x, y, lo, hi = point(rows)
            if y < floor:  # collapsed to chance: drawn on the floor, its value written
                ax.plot([x], [floor + 0.003], marker="v", color=color, linestyle="none", label=f"{name}: {y:.2f}")
                ax.annotate(f"{y:.2f}", (x, floor + 0.003), textcoords="offset points", xytext=(6, 4), fontsize=8)
            else:
                ax.errorbar([x], [y], yerr=[[lo], [hi]], fmt=marker, color=color, capsize=4, label=name)
            if mode == "sync":
                ax.axhline(y - 0.01, color="gray", linestyle=":", label="sync - 1 point")
            drawn.add(mode)
        for prefix, kind, style in (("h", "DiLoCo", "-"), ("a", "async DiLoCo", "--"),
                                    ("s", "streaming DiLoCo", "-.")):
            pts = sorted((point(rows), m) for m, rows in modes.items() if m.startswith(prefix))
            if not pts:
                continue
            xs = [p[0][0] for p in pts]
            ax.errorbar(xs, [p[0][1] for p in pts], yerr=[[p[0][2] for p in pts], [p[0][3] for p in pts]],
                        marker="o", linestyle=style, capsize=4, label=f"{kind}, {label}")
            for i, ((x, y, _, _), m) in enumerate(pts):  # neighbours alternate below and above
                ax.annotate(tag(m), (x, y), textcoords="offset points", xytext=(6, -12 if i % 2 == 0 else 6),
                            fontsize=8)
    ax.set_ylim(bottom=floor)
    ax.set_xscale("log")
    ax.set_xlabel("bytes through the parameter server (MB, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.title.set_fontsize(10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    args = sys.argv[1:]
    options = {}
    while args and args[0] in ("--title", "--floor") and len(args) > 1:
        options[args[0][2:]] = args[1] if args[0] == "--title" else float(args[1])
        args = args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    main(args[0], [tuple(a.split("=", 1)) for a in args[1:]], **options)
