#!/usr/bin/env python3
"""Figures for the lab 05 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/05_mixed_precision/figures/ (or OUT_DIR):
  scale_trajectory.png  the loss scale of a real fp16 run with dynamic scaling, per step,
                        skipped steps marked, with the loss below it; from
                        slides/05_mixed_precision/data/scale_trajectory_np2.csv (written by
                        ./dtl bench 05 into build/bench-out/lab05_scale_trajectory.csv);
  comm_ratio.png        16-bit / fp32 gradient-averaging time per backend (the Comm rows of
                        labs/05_mixed_precision/bench/RESULTS.md, 2 and 4 ranks), with the
                        0.55 target and the link model's 0.5;
  formats.png           the range of fp32, fp16 and bf16 on a log2 axis (from the formats'
                        definitions) with the fp16 underflow measured in the tests.
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    python3 slides/05_mixed_precision/make_figures.py [RESULTS_MD [OUT_DIR]]
"""
import csv
import os
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "labs/05_mixed_precision/bench/RESULTS.md")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "figures")
SOURCE = ("data: labs/05_mixed_precision/bench/RESULTS.md (2026-11-25), shared 2-core VM, Open MPI 4.1.4, no GPU; "
          "'emulated' = alpha-beta model of the link over real shared memory")


def scale_trajectory():
    path = os.path.join(HERE, "data", "scale_trajectory_np2.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    step = [int(r["step"]) for r in rows]
    scale = [float(r["scale"]) for r in rows]
    loss = [float(r["loss"]) for r in rows]
    skipped = [(int(r["step"]), float(r["scale"])) for r in rows if r["skipped"] == "1"]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    a.step(step, scale, where="post", color="C0", label="loss scale S used by the step")
    if skipped:
        a.scatter([s for s, _ in skipped], [v for _, v in skipped], color="C3", zorder=3, marker="x",
                  label=f"skipped step (inf/NaN on some rank): {len(skipped)}")
    a.set_yscale("log", base=2)
    a.set_ylabel("S")
    a.legend(loc="lower right")
    a.set_title("fp16, dynamic loss scaling (init 2^16, x2 every 100 clean steps, x0.5 on overflow), 2 ranks")
    b.plot(step, loss, color="C2", linewidth=0.8)
    b.set_ylabel("loss")
    b.set_xlabel("step")
    fig.text(0.01, 0.005, "data: slides/05_mixed_precision/data/scale_trajectory_np2.csv (./dtl bench 05, "
             "2026-11-25, shared 2-core VM)", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(OUT, "scale_trajectory.png"), dpi=110)


def comm_ratios():
    text = open(RESULTS).read()
    sections = re.split(r"^## ", text, flags=re.M)
    data = {}
    for sec in sections:
        m = re.match(r"(\d) ranks", sec)
        if not m:
            continue
        ranks = int(m.group(1))
        for line in sec.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 9 and cells[0].startswith("Comm /"):
                _, backend, kind = [x.strip() for x in cells[0].split("/")]
                data[(ranks, backend, kind)] = float(cells[6])
    backends = ["mpi-half", "emulated 10GbE", "emulated 1GbE"]
    kinds = ["f16 pre", "f16 post", "bf16 pre", "bf16 post"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, ranks in zip(axes, (2, 4)):
        width = 0.2
        for k, kind in enumerate(kinds):
            xs = [i + (k - 1.5) * width for i in range(len(backends))]
            ys = [data.get((ranks, b, kind), float("nan")) for b in backends]
            ax.bar(xs, ys, width, label=kind)
        ax.axhline(0.55, color="C3", linestyle="--", linewidth=1, label="target 0.55")
        ax.axhline(0.5, color="gray", linestyle=":", linewidth=1, label="link model 0.5")
        ax.set_xticks(range(len(backends)))
        ax.set_xticklabels(backends)
        ax.set_yscale("log", base=2)
        ax.set_title(f"{ranks} ranks: 16-bit / fp32 averaging time")
    axes[0].set_ylabel("ratio (median per pair)")
    axes[1].legend(fontsize=8)
    fig.text(0.01, 0.005, SOURCE, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(OUT, "comm_ratio.png"), dpi=110)


def formats():
    # (name, log2 smallest subnormal, log2 smallest normal, log2 largest finite)
    fmts = [("fp32", -149, -126, 128), ("bf16", -133, -126, 128), ("fp16", -24, -14, 16)]
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for y, (name, sub, norm, top) in enumerate(fmts):
        ax.plot([sub, norm], [y, y], color="C1", linewidth=6, solid_capstyle="butt")
        ax.plot([norm, top], [y, y], color="C0", linewidth=6, solid_capstyle="butt")
        ax.text(top + 2, y, name, va="center")
    ax.axvspan(-27, -10, color="C3", alpha=0.12)
    ax.text(-26, 2.45, "typical gradients\n(2^-27 .. 2^-10)", fontsize=8, va="top")
    ax.set_yticks([])
    ax.set_xlabel("log2 |x|   (orange: subnormals; blue: normal numbers)")
    ax.set_xlim(-155, 145)
    ax.set_ylim(-0.6, 2.7)
    ax.set_title("Ranges of fp32, bf16 and fp16: bf16 keeps fp32's exponent, fp16 does not")
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "formats.png"), dpi=110)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    scale_trajectory()
    comm_ratios()
    formats()
    print("wrote", ", ".join(sorted(os.listdir(OUT))), "in", OUT)
