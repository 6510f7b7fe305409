#!/usr/bin/env python3
"""Figures for the lab 06 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/06_fsdp/figures/ (or OUT_DIR):
  memory_over_time.png  parameter and gradient bytes of rank 0 at every hook of one FSDP
                        step, without and with prefetch (the gather/free sawtooth), with
                        the closed form 4S + 4L and the bound 4S + 8L; from
                        slides/06_fsdp/data/memory_fsdp_p{0,1}_np2.csv (written by
                        ./dtl bench 06 into build/bench-out/lab06_memory_fsdp_p{0,1}.csv);
  memory_by_mode.png    peak parameter, gradient and optimizer MiB per rank of DDP,
                        ZeRO-1, ZeRO-2, FSDP and FSDP + prefetch at 2 and 4 ranks (the
                        memory tables of labs/06_fsdp/bench/RESULTS.md).
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    python3 slides/06_fsdp/make_figures.py [RESULTS_MD [OUT_DIR]]
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
RESULTS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "labs/06_fsdp/bench/RESULTS.md")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "figures")
MIB = 1 << 20

# The benchmark's MLP (in 256, hidden 512 x 6, 10 classes) at W = 2: per-unit padded counts.
UNITS = [256 * 512 + 512] + [512 * 512 + 512] * 5 + [512 * 10 + 10]


def closed_form(world, k):
    padded = [(u + world - 1) // world * world for u in UNITS]
    s = sum(padded) // world
    return 4 * s, 4 * s + 4 * (1 + k) * max(padded)


def memory_over_time():
    fig, axes = plt.subplots(2, 1, figsize=(10, 6.5), sharex=False)
    for ax, k in zip(axes, (0, 1)):
        with open(os.path.join(HERE, "data", f"memory_fsdp_p{k}_np2.csv")) as f:
            rows = list(csv.DictReader(f))
        t = [float(r["t_ms"]) for r in rows]
        params = [int(r["params"]) / MIB for r in rows]
        grads = [int(r["grads"]) / MIB for r in rows]
        ax.step(t, params, where="post", label="parameters (shards + gathered units)", color="C0")
        ax.step(t, grads, where="post", label="gradients (shards + full unit gradients)", color="C1")
        shards, bound = closed_form(2, k)
        ax.axhline(shards / MIB, color="gray", linestyle=":", linewidth=1, label="4S: the shards alone")
        ax.axhline(bound / MIB, color="C3", linestyle="--", linewidth=1,
                   label=f"4S + 4(1+k)L = {bound / MIB:.2f} MiB (k = {k})")
        for r, x in zip(rows, t):
            if r["phase"] == "pre_forward" and r["unit"] == "0":
                ax.annotate("forward", (x, bound / MIB), fontsize=7, xytext=(2, 3), textcoords="offset points")
            if r["phase"] == "pre_backward" and r["unit"] == str(len(UNITS) - 1):
                ax.annotate("backward", (x, bound / MIB), fontsize=7, xytext=(2, 3), textcoords="offset points")
        ax.set_ylabel("MiB on rank 0")
        ax.set_title(f"one FSDP step, prefetch {k}: the MemoryTracker at every hook (2 ranks, EMULATED 1GbE)")
        ax.legend(fontsize=7, loc="lower right")
    axes[-1].set_xlabel("time in the step (ms)")
    fig.text(0.01, 0.005, "data: slides/06_fsdp/data/memory_fsdp_p{0,1}_np2.csv (./dtl bench 06, 2026-11-25, "
             "shared 2-core VM, no GPU)", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(OUT, "memory_over_time.png"), dpi=110)


def memory_by_mode():
    text = open(RESULTS).read()
    tables = {}
    for ranks in (2, 4):
        m = re.search(rf"### Memory per rank, {ranks} ranks\n(.*?)\n\n", text, re.S)
        rows = []
        for line in m.group(1).splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) < 6 or not re.match(r"^[\d.]+$", cells[1]):
                continue
            rows.append((cells[0], float(cells[1]), float(cells[2]), float(cells[3]), float(cells[5])))
        tables[ranks] = rows
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, ranks in zip(axes, (2, 4)):
        rows = tables[ranks]
        names = [r[0] for r in rows]
        x = range(len(rows))
        p = [r[1] for r in rows]
        g = [r[2] for r in rows]
        o = [r[3] for r in rows]
        ax.bar(x, p, label="parameters", color="C0")
        ax.bar(x, g, bottom=p, label="gradients", color="C1")
        ax.bar(x, o, bottom=[a + b for a, b in zip(p, g)], label="optimizer (AdamW m, v)", color="C2")
        ax.scatter(x, [r[4] for r in rows], marker="_", s=400, color="k", zorder=3, label="closed form")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_title(f"{ranks} ranks")
    axes[0].set_ylabel("peak MiB per rank")
    axes[0].legend(fontsize=7)
    fig.suptitle("1.45 M-parameter MLP, AdamW: measured (MemoryTracker) = closed form of Note [ZeRO stages]")
    fig.text(0.01, 0.005, "data: labs/06_fsdp/bench/RESULTS.md (./dtl bench 06, 2026-11-25, shared 2-core VM)",
             fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(OUT, "memory_by_mode.png"), dpi=110)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    memory_over_time()
    memory_by_mode()
    print("wrote", OUT)
