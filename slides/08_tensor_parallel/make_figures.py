#!/usr/bin/env python3
"""Figures for the lab 08 deck and handout, from recorded data only (no benchmark is run).

Draws, into slides/08_tensor_parallel/figures/ (or OUT_DIR):
  trace_t4_10gbe.png   one training step of the benchmark's GPT at T = 4 over an emulated
                       10 GbE link: per rank, each unit's forward and backward (compute) and
                       every collective (comm), from data/lab08_trace_t4_10GbE.json (the
                       Chrome trace `./dtl bench 08 -n 4` writes into build/bench-out);
  step_by_link.png     the measured step time and the link model's share per row
                       (data/bench_np2.txt and data/bench_np4.txt);
  params_per_rank.png  parameters per rank against T, measured (the memory tracker) and
                       the closed form (full - replicated)/T + replicated;
  gpu_model.png        the model of a GPT-3-sized block on a GPU node: its 4 allreduces per
                       link, as a multiple of its compute (the '# model' lines of the bench).
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian).

From the repository root:
    /usr/bin/python3 slides/08_tensor_parallel/make_figures.py [OUT_DIR]
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
SOURCE = ("data: ./dtl bench 08 -n 2 and -n 4 (2026-11-25), shared 2-core VM, Open MPI 4.1.4, no GPU; "
          "links EMULATED (alpha-beta model over real shared memory)")
ROW = re.compile(r"^(\w+)/T(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\d+)")


def rows(ranks):
    out = {}
    with open(os.path.join(HERE, "data", f"bench_np{ranks}.txt")) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                link, t = m.group(1), int(m.group(2))
                out[(link, t)] = dict(step=float(m.group(3)), comm=float(m.group(4)), link=float(m.group(5)),
                                      ops=int(m.group(6)), mib=float(m.group(7)), params=int(m.group(8)))
    return out


def save(fig, name):
    fig.text(0.01, 0.01, SOURCE, fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = os.path.join(OUT, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("wrote", path)


def trace():
    with open(os.path.join(HERE, "data", "lab08_trace_t4_10GbE.json")) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    ranks = 1 + max(e["pid"] for e in events)
    fig, ax = plt.subplots(figsize=(11, 0.9 * ranks + 1.4))
    for e in events:
        y = 2 * e["pid"] + (e["tid"] - 1) * 0.9
        comm = e["tid"] == 2
        color = "tab:red" if comm else ("tab:blue" if e["name"].startswith("F") else "tab:green")
        ax.barh(y, e["dur"] / 1e3, left=e["ts"] / 1e3, height=0.8, color=color, alpha=0.8, edgecolor="black",
                linewidth=0.3)
        if not comm and e["dur"] / 1e3 > 1.2:
            ax.text((e["ts"] + e["dur"] / 2) / 1e3, y, e["name"], ha="center", va="center", fontsize=6)
    ax.set_yticks([2 * r + dy for r in range(ranks) for dy in (0, 0.9)],
                  [f"rank {r} {k}" for r in range(ranks) for k in ("compute", "comm")], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("one step at T = 4 over an emulated 10 GbE link: forward (blue), backward (green), "
                 "collectives (red) block the compute", fontsize=9)
    save(fig, "trace_t4_10gbe.png")


def step_by_link():
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, ranks in zip(axes, (2, 4)):
        data = rows(ranks)
        names = [f"{link}\nT={t}" for (link, t) in data]
        x = range(len(names))
        ax.bar(x, [v["step"] for v in data.values()], color="lightgray", edgecolor="black", label="step (measured)")
        ax.bar(x, [v["comm"] for v in data.values()], color="tab:red", alpha=0.5, label="in collectives (measured)")
        ax.bar(x, [v["link"] for v in data.values()], color="tab:red", label="link model's share")
        ax.set_xticks(list(x), names, fontsize=7)
        ax.set_title(f"{ranks} ranks on 2 cores", fontsize=9)
        ax.set_ylabel("ms per step")
    axes[0].legend(fontsize=7)
    save(fig, "step_by_link.png")


def params_per_rank():
    data = rows(4)
    ts = sorted(t for (link, t) in data if link == "mpi")
    measured = [data[("mpi", t)]["params"] for t in ts]
    # The closed form for the benchmark's GPT (V 128, context 32, C 128, 2 blocks), f32, in KiB.
    V, S, C, L = 128, 32, 128, 2
    full = 2 * V * C + S * C + L * (12 * C * C + 13 * C) + 2 * C
    replicated = S * C + L * (6 * C) + 2 * C
    closed = [((full - replicated) / t + replicated) * 4 / 1024 for t in ts]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(ts, closed, "o-", label="(full - replicated) / T + replicated")
    ax.plot(ts, measured, "x", markersize=12, label="measured (memory tracker)")
    ax.set_xticks(ts)
    ax.set_xlabel("T")
    ax.set_ylabel("parameters per rank (KiB)")
    ax.legend(fontsize=8)
    ax.set_title("parameters per rank shrink by T; LayerNorms, biases and positions do not", fontsize=9)
    save(fig, "params_per_rank.png")


def gpu_model():
    links, ratios = [], []
    with open(os.path.join(HERE, "data", "bench_np2.txt")) as f:
        for line in f:
            m = re.match(r"^#\s+(\S+)\s+[\d.]+ ms of allreduce per block =\s+([\d.]+) x the compute", line)
            if m:
                links.append(m.group(1))
                ratios.append(float(m.group(2)))
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar(links, ratios, color=["tab:green" if r < 1 else "tab:red" for r in ratios], edgecolor="black")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("allreduce time / compute time")
    ax.set_title("model: a GPT-3-sized block, T = 8, 2048 tokens, bf16, 400 TFLOP/s per GPU", fontsize=9)
    for i, r in enumerate(ratios):
        ax.text(i, r * 1.15, f"{r:.2f}x", ha="center", fontsize=8)
    save(fig, "gpu_model.png")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    trace()
    step_by_link()
    params_per_rank()
    gpu_model()
