#!/usr/bin/env python3
"""Figures for the lab 05 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/05_mixed_precision/figures/ (or OUT_DIR):
  gradients.png         where the fp32 gradients of a real run lie against the ranges of
                        fp16 and bf16 (log2 |g| histograms at three steps), with the
                        underflow threshold at loss scale 1 and at the run's scale; from
                        data/grad_histogram_np2.csv;
  scale_trajectory.png  the loss scale of that fp16 run with dynamic scaling, per step,
                        skipped steps marked, with the loss below it; from
                        data/scale_trajectory_np2.csv;
  master_weights.png    the spirals MLP trained in fp32, in bf16 with an fp32 master and
                        with the weights kept in bf16 only; from data/master_weights.csv;
  comm_ratio.png        16-bit / fp32 gradient-averaging time per backend (the Comm rows
                        of labs/05_mixed_precision/bench/RESULTS.md, 2 and 4 ranks), with
                        the 0.55 target and the link model's ratio;
  comm_parts.png        the parts of those times on the emulated links (2 ranks): the link
                        model's time and the CPU arithmetic, beside the measured times.
The CSV files are the ones `./dtl bench 05` writes into build/bench-out (lab05_*.csv),
copied into data/ with the rank count in the name.
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    python3 slides/05_mixed_precision/make_figures.py [RESULTS_MD [OUT_DIR]]
"""
import csv
import math
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
DATA = os.path.join(HERE, "data")


def run_date():
    """The date line of RESULTS.md ("Date: YYYY-MM-DD.")."""
    m = re.search(r"^Date: (\d{4}-\d\d-\d\d)", open(RESULTS).read(), flags=re.M)
    return m.group(1) if m else "?"


SOURCE = (f"data: labs/05_mixed_precision/bench/RESULTS.md ({run_date()}), shared 2-core VM, Open MPI 4.1.4, "
          "no GPU; 'emulated' = alpha-beta model of the link over real shared memory")


def read_csv(name):
    with open(os.path.join(DATA, name)) as f:
        return list(csv.DictReader(f))


def gradients():
    rows = read_csv("grad_histogram_np2.csv")
    steps = sorted({int(r["step"]) for r in rows})
    fig, axes = plt.subplots(len(steps), 1, figsize=(9, 1.9 * len(steps) + 1.2), sharex=True)
    for ax, step in zip(axes, steps):
        mine = [r for r in rows if int(r["step"]) == step]
        scale = float(mine[0]["scale"])
        bins = {int(r["log2_bin"]): int(r["count"]) for r in mine if int(r["log2_bin"]) != -1000}
        zeros = sum(int(r["count"]) for r in mine if int(r["log2_bin"]) == -1000)
        total = sum(bins.values())
        # fp16: normal 2^-14 .. 65504, subnormal 2^-24 .. 2^-14, zero below 2^-25; beyond 2^16: inf.
        ax.axvspan(-40, -25, color="C3", alpha=0.10)
        ax.axvspan(-25, -14, color="C1", alpha=0.12)
        ax.axvspan(-14, 16, color="C0", alpha=0.08)
        ax.bar([b + 0.5 for b in bins], [bins[b] for b in bins], width=0.9, color="C2",
               label="fp32 gradients (rank 0, scale 1)")
        s = int(round(math.log2(scale)))
        ax.bar([b + s + 0.5 for b in bins], [bins[b] for b in bins], width=0.9, color="none", edgecolor="C4",
               label=f"the same times the run's scale 2^{s}")
        under = sum(c for b, c in bins.items() if b < -25)
        ax.set_ylabel("count")
        ax.set_title(f"step {step}: {total} non-zero gradients ({zeros} exact zeros); "
                     f"{under} below 2^-25 (zero in fp16 unscaled)", fontsize=9)
    top = axes[-1].get_ylim()[1] * 0.85
    axes[-1].text(-39.5, top, "fp16: rounds to 0", fontsize=8, color="C3")
    axes[-1].text(-24.5, top, "fp16 subnormal", fontsize=8, color="C1")
    axes[-1].text(-13.5, top, "fp16 normal (bf16: all of it)", fontsize=8, color="C0")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("log2 |g|   (fp16: 0 below 2^-25, subnormal up to 2^-14, inf above 65504 = 2^16; "
                        "bf16: 2^-133 .. 2^128)")
    axes[-1].set_xlim(-40, 18)
    fig.suptitle("Where real gradients sit in fp16's range: fp16 run of the spirals MLP, 2 ranks", fontsize=11)
    fig.text(0.01, 0.005, "data: slides/05_mixed_precision/data/grad_histogram_np2.csv "
             f"(./dtl bench 05, {run_date()}, shared 2-core VM)", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(OUT, "gradients.png"), dpi=110)


def scale_trajectory():
    rows = read_csv("scale_trajectory_np2.csv")
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
             f"{run_date()}, shared 2-core VM)", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(OUT, "scale_trajectory.png"), dpi=110)


def master_weights():
    rows = read_csv("master_weights.csv")
    step = [int(r["step"]) for r in rows]

    def smooth(values, k=50):
        out, run = [], 0.0
        for i, v in enumerate(values):
            run += v
            if i >= k:
                run -= values[i - k]
            out.append(run / min(i + 1, k))
        return out

    fig, ax = plt.subplots(figsize=(9, 4))
    for key, label, style in (("fp32", "fp32", dict(color="C0", linewidth=2.5)),
                              ("bf16_fp32_master", "bf16 working copy, fp32 master (the trainer)",
                               dict(color="C1", linestyle="--")),
                              ("bf16_only", "bf16 weights only (each update rounded into bf16)",
                               dict(color="C3"))):
        values = [float(r[key]) for r in rows]
        ax.plot(step, smooth(values), label=f"{label}: last 100 steps {sum(values[-100:]) / 100:.3f}", **style)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean of 50 steps)")
    ax.set_title("Why an fp32 master: AdamW lr 1e-4 on the spirals MLP, one rank")
    ax.legend()
    fig.text(0.01, 0.005, "data: slides/05_mixed_precision/data/master_weights.csv "
             f"(./dtl bench 05, {run_date()}, shared 2-core VM)", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(OUT, "master_weights.png"), dpi=110)


def results_rows():
    """{(ranks, row name): {column: value}} from the tables of RESULTS.md, by header."""
    text = open(RESULTS).read()
    data = {}
    for sec in re.split(r"^## ", text, flags=re.M):
        m = re.match(r"(\d) ranks", sec)
        if not m:
            continue
        ranks, header = int(m.group(1)), None
        for line in sec.splitlines():
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "row":
                header = cells
            elif header and not cells[0].startswith("---"):
                data[(ranks, " ".join(cells[0].split()))] = {
                    h: float(c) for h, c in zip(header[1:], cells[1:]) if re.match(r"^-?[\d.e+-]+$", c)}
    return data


def comm_ratio(data):
    backends = ["mpi-half", "emulated 10GbE", "emulated 1GbE"]
    kinds = ["f16 pre", "f16 post", "bf16 pre", "bf16 post"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, ranks in zip(axes, (2, 4)):
        width = 0.2
        for k, kind in enumerate(kinds):
            xs = [i + (k - 1.5) * width for i in range(len(backends))]
            ys = [data.get((ranks, f"Comm / {b} / {kind}"), {}).get("ratio", float("nan")) for b in backends]
            ax.bar(xs, ys, width, label=kind)
        link = data.get((ranks, "Comm / emulated 10GbE / f16 pre"), {})
        if link.get("fp32 link (ms)"):
            ax.axhline(link["16-bit link (ms)"] / link["fp32 link (ms)"], color="gray", linestyle=":", linewidth=1,
                       label="link model alone")
        ax.axhline(0.55, color="C3", linestyle="--", linewidth=1, label="target 0.55")
        ax.set_xticks(range(len(backends)))
        ax.set_xticklabels(backends)
        ax.set_yscale("log", base=2)
        ax.set_title(f"{ranks} ranks: 16-bit / fp32 averaging time")
    axes[0].set_ylabel("ratio (median per pair)")
    axes[1].legend(fontsize=8)
    fig.text(0.01, 0.005, SOURCE, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(OUT, "comm_ratio.png"), dpi=110)


def comm_parts(data):
    rows = [f"Comm / emulated {link} / {kind}" for link in ("10GbE", "1GbE") for kind in ("f16 pre", "bf16 pre")]
    parts = [("fp32 link (ms)", "fp32: link model", "C0", None),
             ("fp32 (ms)", "fp32: measured", "C0", "//"),
             ("16-bit link (ms)", "16-bit: link model", "C1", None),
             ("16-bit arith (ms)", "16-bit: CPU adds + divide alone", "C3", None),
             ("16-bit (ms)", "16-bit: measured", "C1", "//")]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.16
    for k, (col, label, color, hatch) in enumerate(parts):
        xs = [i + (k - 2) * width for i in range(len(rows))]
        ys = [data.get((2, r), {}).get(col, float("nan")) for r in rows]
        ax.bar(xs, ys, width, label=label, color=color if hatch is None else "white", edgecolor=color, hatch=hatch)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.replace("Comm / ", "") for r in rows])
    ax.set_ylabel("ms (median)")
    ax.set_title("2 ranks, one average of 1 Mi gradients: the link model, the CPU arithmetic alone, measured")
    ax.legend(fontsize=8)
    fig.text(0.01, 0.005, SOURCE, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(OUT, "comm_parts.png"), dpi=110)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    gradients()
    scale_trajectory()
    master_weights()
    rows = results_rows()
    comm_ratio(rows)
    comm_parts(rows)
    print("wrote", ", ".join(sorted(os.listdir(OUT))), "in", OUT)
