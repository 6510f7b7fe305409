#!/usr/bin/env python3
"""Figures for the lab 07 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/07_pipeline/figures/ (or OUT_DIR):
  timeline_{naive,gpipe,1f1b}.png  the classic pipeline picture, stages x time, F light and B
                        dark, one colour per micro-batch, from the real events of one step
                        (data/trace_*_p4.json: the Chrome traces `./dtl bench 07 -n 4` writes
                        into build/bench-out, P = 4, m = 8, emulated compute);
  bubble.png            the measured bubble of GPipe and 1F1B against (P - 1)/(m + P - 1),
                        P = 2, 3, 4, m = 1 .. 16 (the Emulated rows of data/bench_np4.txt);
  memory.png            stage 0's peak activations, GPipe vs 1F1B vs 1F1B with checkpointing
                        (the Emulated P = 4 and Real P = 2 rows of data/bench_np4.txt).
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    /usr/bin/python3 slides/07_pipeline/make_figures.py [OUT_DIR]
"""
import json
import os
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "figures")
SOURCE = ("data: ./dtl bench 07 -n 4 (2026-11-25), shared 2-core VM, Open MPI 4.1.4, no GPU; "
          "compute EMULATED (sleeping layers), messages over real shared memory")


def timeline(schedule):
    with open(os.path.join(HERE, "data", f"trace_{schedule}_p4.json")) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    stages = 1 + max(e["pid"] for e in events)
    m = 1 + max(int(e["args"]["micro_batch"]) for e in events)
    cmap = plt.get_cmap("tab10" if m <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(10, 0.6 * stages + 1.2))
    for e in events:
        i = int(e["args"]["micro_batch"])
        forward = e["name"].startswith("F")
        start, width = e["ts"] / 1e3, e["dur"] / 1e3
        ax.barh(e["pid"], width, left=start, height=0.8, color=cmap(i % cmap.N), alpha=0.45 if forward else 1.0,
                edgecolor="black", linewidth=0.5)
        if width > 2.5:
            ax.text(start + width / 2, e["pid"], e["name"], ha="center", va="center", fontsize=7)
    end = max((e["ts"] + e["dur"]) / 1e3 for e in events)
    ax.set_yticks(range(stages), [f"stage {s}" for s in range(stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    name = {"naive": "naive model parallelism (m = 1)", "gpipe": "GPipe", "1f1b": "1F1B"}[schedule]
    ax.set_title(f"{name}: P = {stages}, m = {m}, one step of {end:.0f} ms; white = bubble "
                 f"(theory {(stages - 1) / (m + stages - 1):.0%})", fontsize=10)
    fig.text(0.01, 0.01, SOURCE, fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = os.path.join(OUT, f"timeline_{schedule}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


ROW = re.compile(r"^(\w+)/P(\d)/([\w+]+)/m(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)")


def rows():
    out = []
    with open(os.path.join(HERE, "data", "bench_np4.txt")) as f:
        for line in f:
            r = ROW.match(line)
            if r:
                out.append(dict(kind=r[1], P=int(r[2]), sched=r[3], m=int(r[4]), step=float(r[5]),
                                bubble=float(r[6]), theory=float(r[7]), act0=int(r[9])))
    return out


def bubble():
    data = [r for r in rows() if r["kind"] == "Emulated"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {2: "tab:blue", 3: "tab:orange", 4: "tab:green"}
    for P in (2, 3, 4):
        ms = [1, 2, 4, 8, 16]
        ax.plot(ms, [100 * (P - 1) / (m + P - 1) for m in ms], color=colors[P], linewidth=1, label=f"theory P = {P}")
        for sched, marker in (("gpipe", "o"), ("1f1b", "s")):
            pts = sorted((r["m"], r["bubble"]) for r in data if r["P"] == P and r["sched"] == sched)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, color=colors[P], fillstyle="none",
                    label=f"{sched} P = {P}" if P == 4 or sched == "gpipe" else None)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble (% of the step)")
    ax.set_title("measured bubble (markers) vs (P-1)/(m+P-1) (lines), balanced emulated stages", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.text(0.01, 0.01, SOURCE, fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = os.path.join(OUT, "bubble.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


def memory():
    data = rows()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    for sched, marker in (("gpipe", "o-"), ("1f1b", "s-")):
        pts = sorted((r["m"], r["act0"]) for r in data if r["kind"] == "Emulated" and r["P"] == 4 and r["sched"] == sched)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=sched)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("stage 0 peak activations (KiB)")
    ax.set_title("P = 4: GPipe holds the whole batch, 1F1B 4 micro-batches", fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    ax = axes[1]
    real = [r for r in data if r["kind"] == "Real" and r["m"] == 16]
    labels = [r["sched"] for r in real]
    ax.bar(labels, [r["act0"] for r in real], color="tab:purple")
    for k, r in enumerate(real):
        ax.text(k, r["act0"], f"{r['act0']} KiB\n{r['step']:.1f} ms", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("stage 0 peak activations (KiB)")
    ax.set_title("real MLP, P = 2, m = 16 (step time above each bar)", fontsize=9)
    fig.text(0.01, 0.01, SOURCE.replace("compute EMULATED", "left: compute EMULATED; right: real compute"),
             fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = os.path.join(OUT, "memory.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for s in ("naive", "gpipe", "1f1b"):
        timeline(s)
    bubble()
    memory()
