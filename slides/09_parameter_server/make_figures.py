#!/usr/bin/env python3
"""Figures for the lab 09 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/09_parameter_server/figures/ (or OUT_DIR):
  time_to_accuracy.png  seconds to 90% held-out accuracy for BSP, SSP(1), SSP(4) and ASP,
                        without and with a straggler (x3), for each (S, W) recorded
                        (the Train rows of data/bench_np4.txt and data/bench_np5.txt);
  throughput.png        worker steps per second, the same rows;
  ps_vs_ring.png        one step's traffic on the emulated 10 GbE link: the parameter
                        server's time over the ring allreduce's, measured, beside the
                        closed form W^2 / (S (W - 1)) (the Link10GbE rows).
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    /usr/bin/python3 slides/09_parameter_server/make_figures.py [OUT_DIR]
"""
import os
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "figures")
SOURCE = ("data: ./dtl bench 09 -n 4 and -n 5 (2026-11-25), shared 2-core VM, Open MPI 4.1.4, no GPU; "
          "worker compute EMULATED (4 ms sleep per step, straggler 12 ms), messages over real shared memory")
MODELS = ["bsp", "ssp1", "ssp4", "asp"]
LABELS = {"bsp": "BSP", "ssp1": "SSP(1)", "ssp4": "SSP(4)", "asp": "ASP"}


def rows():
    """{name: [numbers...]} for every row of the recorded runs ('-' is None)."""
    out = {}
    for file in ("bench_np4.txt", "bench_np5.txt"):
        with open(os.path.join(HERE, "data", file)) as f:
            for line in f:
                if not re.match(r"^(Train|Link10GbE)/", line):
                    continue
                parts = line.split()
                out[parts[0]] = [None if p == "-" else float(p) for p in parts[1:]]
    return out


def configs(data):
    """The (S, W) pairs of the Train rows, in order."""
    seen = []
    for name in data:
        m = re.match(r"Train/S(\d+)/W(\d+)/", name)
        if m and (int(m.group(1)), int(m.group(2))) not in seen:
            seen.append((int(m.group(1)), int(m.group(2))))
    return sorted(seen)


def bars(data, column, ylabel, title, path, note):
    cfgs = configs(data)
    fig, axes = plt.subplots(1, len(cfgs), figsize=(3.2 * len(cfgs) + 1, 3.6), sharey=True)
    for ax, (S, W) in zip(axes, cfgs):
        for k, straggler in enumerate(("even", "straggler")):
            values = []
            for m in MODELS:
                row = data.get(f"Train/S{S}/W{W}/{m}/{straggler}")
                values.append(row[column] if row and row[column] is not None and row[column] >= 0 else 0)
            xs = [i + 0.38 * k for i in range(len(MODELS))]
            ax.bar(xs, values, width=0.38, label="no straggler" if k == 0 else "one straggler (x3)",
                   color="#4a7ab5" if k == 0 else "#d9822b")
        ax.set_xticks([i + 0.19 for i in range(len(MODELS))], [LABELS[m] for m in MODELS], fontsize=8)
        ax.set_title(f"S = {S} server{'s' if S > 1 else ''}, W = {W} workers", fontsize=9)
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.01, SOURCE + note, fontsize=5.5, color="gray")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


def ps_vs_ring(data):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    series = {}
    for name, row in data.items():
        m = re.match(r"Link10GbE/S(\d+)/W(\d+)/(\d+)MiB", name)
        if m:
            series.setdefault((int(m.group(1)), int(m.group(2))), []).append((int(m.group(3)), row[6], row[7]))
    for (S, W), points in sorted(series.items()):
        points.sort()
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=f"measured, S = {S}, W = {W}")
        ax.axhline(W * W / (S * (W - 1)), color=line.get_color(), linestyle="--", linewidth=1,
                   label=f"W²/(S(W−1)) = {W * W / (S * (W - 1)):.2f}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("model size n (MiB)")
    ax.set_ylabel("parameter server / ring allreduce")
    ax.set_ylim(bottom=0)
    ax.set_title("one step's traffic on an emulated 10 GbE link: the server's link is the bottleneck", fontsize=9)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.01, SOURCE.split(";")[0] + "; both sides sleep the link model's time", fontsize=5.5,
             color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = os.path.join(OUT, "ps_vs_ring.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


def main():
    os.makedirs(OUT, exist_ok=True)
    data = rows()
    bars(data, 1, "seconds to 90% held-out accuracy",
         "time to accuracy on the spirals (lower is better; 0 = not reached)",
         os.path.join(OUT, "time_to_accuracy.png"), "; tta from the first pulled weights reaching 90%")
    bars(data, 0, "worker steps per second (all workers)", "throughput: each worker's own rate, summed",
         os.path.join(OUT, "throughput.png"), "")
    ps_vs_ring(data)


if __name__ == "__main__":
    main()
