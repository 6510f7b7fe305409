#!/usr/bin/env python3
"""Figures for the lab 02 deck, from the tables recorded in labs/02_collectives/bench/RESULTS.md.

Draws, into slides/02_collectives/figures/ (or OUT_DIR):
  bcast_crossover.png  broadcast_binomial() vs broadcast_scatter_allgather(), time vs size at
                       2 and 4 ranks, and their quotient beside the total-bytes prediction and
                       the alpha-beta model's crossover;
  vs_openmpi.png       time / Open MPI's time (median of per-pair ratios) for every collective,
                       2 and 4 ranks;
  busbw.png            bus bandwidth (nccl-tests' definition) of every collective, 2 and 4 ranks.
Needs Python 3 and matplotlib only; reuses slides/plot_bench.py's table reader and axes.

From the repository root:
    python3 slides/02_collectives/make_figures.py [RESULTS_MD [OUT_DIR]]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # slides/, for plot_bench

import plot_bench as pb  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

# The alpha-beta crossover n* = (P-1) alpha / ((L - 2(P-1)/P) beta) with lab 01's fit over
# the rendezvous sizes (alpha = 2.528 us, beta = 0.0862 ns/B), as RESULTS.md's table gives it.
MODEL_CROSSOVER_4_RANKS = 176e3  # bytes
# Total bytes copied, scatter+allgather / tree: 1.5n / n at P = 2, 4n / 3n at P = 4.
BYTES_QUOTIENT = {2: 1.5, 4: 4 / 3}
COLLECTIVES = ["Bcast", "Scatter", "Gather", "Reduce", "AllgatherRing", "AllgatherRecDbl", "Alltoall"]
MARKERS = dict(zip(COLLECTIVES, "os^vDPx"))


def rank_tables(tables):
    """{P: {collective: [(size, row dict), ...]}} from the '2 ranks' / '4 ranks' tables."""
    out = {}
    for heading, header, rows in tables:
        if not heading.endswith("ranks") and "ranks (" not in heading:
            continue
        if header[0] != "row":
            continue
        ranks = int(heading.split()[0])
        for cells in rows:
            row = dict(zip(header, cells))
            name = row["row"].split("/")[0]
            out.setdefault(ranks, {}).setdefault(name, []).append((int(row["size (B)"]), row))
    for by_name in out.values():
        for pts in by_name.values():
            pts.sort(key=lambda p: p[0])
    return out


def crossover_table(tables):
    """[(size, tree2, sag2, tree4, sag4)] from the broadcast crossover table (by position)."""
    for _, header, rows in tables:
        if header[0] == "size" and "tree" in header[1]:
            return [(pb.parse_size(r[0]), float(r[1]), float(r[2]), float(r[4]), float(r[5])) for r in rows]
    sys.exit("no broadcast crossover table (size | 2 ranks: tree | ...) found")


def plot_crossover(rows, out_dir, source):
    sizes = [r[0] for r in rows]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.2))
    for p, (ti, si), color in ((2, (1, 2), "C0"), (4, (3, 4), "C3")):
        ax.loglog(sizes, [r[ti] for r in rows], "o-", color=color, label=f"binomial tree, {p} ranks")
        ax.loglog(sizes, [r[si] for r in rows], "s--", color=color, mfc="none",
                  label=f"scatter + ring allgather, {p} ranks")
        bx.plot(sizes, [r[si] / r[ti] for r in rows], "o-", color=color, label=f"measured, {p} ranks")
        bx.axhline(BYTES_QUOTIENT[p], linestyle=":", color=color,
                   label=f"total bytes copied, {p} ranks: {BYTES_QUOTIENT[p]:.2f}")
    pb.size_axis(ax, sizes, every=2)
    ax.set_ylabel("time of one broadcast (us, median)")
    ax.set_title("Broadcast: time vs size")
    ax.legend(fontsize=8.5)
    pb.size_axis(bx, sizes, every=2)
    bx.axhline(1.0, color="black", linewidth=0.8)
    bx.axvline(MODEL_CROSSOVER_4_RANKS, linestyle="--", color="gray",
               label="model: scatter+allgather wins\nabove 176 KB at 4 ranks")
    bx.set_ylim(0, 3)
    bx.set_ylabel("scatter+allgather time / tree time  (> 1: tree faster)")
    bx.set_title("No crossover on 2 cores: the tree wins at every size")
    bx.legend(fontsize=8.5, loc="upper right")
    fig.suptitle(f"data: {source}, 2-vCPU VM, Open MPI 4.1.4", fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "bcast_crossover.png")


def plot_vs_openmpi(by_ranks, out_dir, source):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, p in zip(axes, sorted(by_ranks)):
        all_sizes = set()
        for i, name in enumerate(COLLECTIVES):
            pts = by_ranks[p].get(name, [])
            if not pts:
                continue
            sizes = [s for s, _ in pts]
            all_sizes.update(sizes)
            ax.plot(sizes, [float(r["time/vendor"]) for _, r in pts], marker=MARKERS[name], color=f"C{i}",
                    linestyle="-", label=name)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.25, color="gray", linestyle="--", linewidth=0.8, label="1.25 (the target, >= 4 MiB)")
        pb.size_axis(ax, sorted(all_sizes), every=1)
        ax.set_xlabel("size (message, or all P blocks)")
        ax.set_title(f"{p} ranks" + (" (oversubscribed: 2 per core; read to +-0.3)" if p > 2 else ""))
        ax.set_ylim(0.5, 3.3)
    axes[0].set_ylabel("time / Open MPI's time (median of per-pair ratios)")
    axes[0].legend(fontsize=8.5, loc="upper left")
    fig.suptitle(f"data: {source}, 2-vCPU VM, Open MPI 4.1.4", fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "vs_openmpi.png")


def plot_busbw(by_ranks, out_dir, source):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, p in zip(axes, sorted(by_ranks)):
        all_sizes = set()
        for i, name in enumerate(COLLECTIVES):
            pts = by_ranks[p].get(name, [])
            if len(pts) < 2:
                continue
            sizes = [s for s, _ in pts]
            all_sizes.update(sizes)
            ax.plot(sizes, [float(r["busbw (GB/s)"]) for _, r in pts], marker=MARKERS[name], color=f"C{i}",
                    label=name)
        pb.size_axis(ax, sorted(all_sizes), every=1)
        ax.set_xlabel("size (message, or all P blocks)")
        ax.set_title(f"{p} ranks" + (" (oversubscribed)" if p > 2 else ""))
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("busbw (GB/s) = algbw x 1 (bcast, reduce) or x (P-1)/P")
    axes[0].legend(fontsize=8.5, loc="upper left")
    fig.suptitle(f"data: {source}, 2-vCPU VM, Open MPI 4.1.4", fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "busbw.png")


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "labs/02_collectives/bench/RESULTS.md")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "figures")
    os.makedirs(out_dir, exist_ok=True)
    tables = pb.read_markdown_tables(results)
    source = "labs/02_collectives/bench/RESULTS.md (2026-11-21)"
    plot_crossover(crossover_table(tables), out_dir, source)
    by_ranks = rank_tables(tables)
    plot_vs_openmpi(by_ranks, out_dir, source)
    plot_busbw(by_ranks, out_dir, source)


if __name__ == "__main__":
    main()
