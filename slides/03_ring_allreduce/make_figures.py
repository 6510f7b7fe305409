#!/usr/bin/env python3
"""Figures for the lab 03 deck, from the tables recorded in labs/03_ring_allreduce/bench/RESULTS.md.

Draws, into slides/03_ring_allreduce/figures/ (or OUT_DIR):
  allreduce_time.png   allreduce_ring() and allreduce_ring_segmented() beside Open MPI's
                       default MPI_Allreduce and its forced ring, time vs size, 2 and 4 ranks;
  allreduce_ratio.png  time / Open MPI default and time / Open MPI ring (medians of per-pair
                       ratios), with the 1.25 target from 1 MiB;
  busbw.png            busbw of the allreduce, reduce-scatter and allgather rings, 2 and 4 ranks;
  segment_sweep.png    the segmented ring of 16 MiB vs segment size, as time / Open MPI default.
CPU only: the GPU rows of part 2 are not measured yet (RESULTS.md says so), so there is no
GPU figure. Needs Python 3 and matplotlib; reuses slides/plot_bench.py's table reader and axes.

From the repository root:
    python3 slides/03_ring_allreduce/make_figures.py [RESULTS_MD [OUT_DIR]]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # slides/, for plot_bench

import plot_bench as pb  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

SOURCE = "data: labs/03_ring_allreduce/bench/RESULTS.md (2026-11-22), 2-vCPU VM under load, Open MPI 4.1.4"
FAMILIES = ["AllreduceRing", "AllreduceRingSegmented", "ReduceScatterRing", "AllgatherRing", "SegmentSweep"]


def load(path):
    """{(family, P): [row dict, ...]} from the '#### <family>, <P> ranks' tables."""
    out = {}
    for heading, header, rows in pb.read_markdown_tables(path):
        family, _, ranks = heading.partition(", ")
        if family not in FAMILIES or not ranks.endswith("ranks"):
            continue
        out[(family, int(ranks.split()[0]))] = [dict(zip(header, r)) for r in rows]
    if not out:
        sys.exit(f"{path}: no '<family>, <P> ranks' tables")
    return out


def column(rows, name):
    return [pb.cell_number(r[name]) for r in rows]


def sizes_of(rows):
    return [int(r["size (B)"]) for r in rows]


def plot_time(t, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.4), sharey=True)
    for ax, p in zip(axes, (2, 4)):
        ring, seg = t[("AllreduceRing", p)], t[("AllreduceRingSegmented", p)]
        sizes = sizes_of(ring)
        ax.loglog(sizes, column(ring, "time (us)"), "o-", color="C0", label="allreduce_ring() (reference)")
        ax.loglog(sizes_of(seg), column(seg, "time (us)"), "s-", color="C2", mfc="none",
                  label="allreduce_ring_segmented(), 256 KiB segments")
        ax.loglog(sizes, column(ring, "Open MPI default (us)"), "x--", color="C1", ms=8,
                  label="MPI_Allreduce, Open MPI's default")
        ax.loglog(sizes, column(ring, "Open MPI ring (us)"), "+:", color="C3", ms=9,
                  label="MPI_Allreduce, Open MPI's ring forced")
        pb.size_axis(ax, sizes, every=2)
        ax.set_xlabel("size of each rank's buffer (float)")
        ax.set_title(f"{p} ranks" + (" (oversubscribed: 2 per core)" if p > 2 else ""))
    axes[0].set_ylabel("time of one allreduce (us, median; slowest rank)")
    axes[0].legend(fontsize=8.5, loc="upper left")
    fig.suptitle(SOURCE, fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "allreduce_time.png")


def plot_ratio(t, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, p in zip(axes, (2, 4)):
        for family, color, marker in (("AllreduceRing", "C0", "o"), ("AllreduceRingSegmented", "C2", "s")):
            rows = t[(family, p)]
            sizes = sizes_of(rows)
            ax.plot(sizes, column(rows, "time/default"), marker + "-", color=color,
                    label=f"{family}: time / Open MPI default")
            ax.plot(sizes, column(rows, "time/ring"), marker + "--", color=color, mfc="none",
                    label=f"{family}: time / Open MPI ring")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.hlines(1.25, 1 << 20, sizes[-1], colors="gray", linestyles="--",
                  label="target from 1 MiB: <= 1.25")
        ax.axvspan(sizes[0] / 1.5, 65536 * 1.5, color="C1", alpha=0.08,
                   label="small sizes: 2(P-1) latencies")
        pb.size_axis(ax, sizes, every=2)
        ax.set_xlabel("size of each rank's buffer (float)")
        ax.set_title(f"{p} ranks" + (" (oversubscribed)" if p > 2 else ""))
        ax.set_ylim(0.5, 2.7)
    axes[0].set_ylabel("time / Open MPI's time (median of per-pair ratios)")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle(SOURCE, fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "allreduce_ratio.png")


def plot_busbw(t, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    styles = {"AllreduceRing": ("o-", "C0"), "AllreduceRingSegmented": ("s-", "C2"),
              "ReduceScatterRing": ("v--", "C3"), "AllgatherRing": ("^--", "C4")}
    for ax, p in zip(axes, (2, 4)):
        for family, (style, color) in styles.items():
            rows = t[(family, p)]
            ax.plot(sizes_of(rows), column(rows, "busbw (GB/s)"), style, color=color, label=family)
        pb.size_axis(ax, sizes_of(t[("AllreduceRing", p)]), every=2)
        ax.set_xlabel("size of each rank's buffer (float)")
        ax.set_title(f"{p} ranks" + (" (oversubscribed)" if p > 2 else ""))
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("busbw (GB/s) = size/time x 2(P-1)/P (allreduce), x (P-1)/P (halves)")
    axes[0].legend(fontsize=8.5, loc="upper left")
    fig.suptitle(SOURCE, fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "busbw.png")


def plot_sweep(t, out_dir):
    fig, ax = plt.subplots(figsize=(8, 5))
    for p, color in ((2, "C0"), (4, "C3")):
        rows = t[("SegmentSweep", p)]
        segs = [pb.parse_size(r["row"].split("segment ")[1]) for r in rows]
        ax.plot(segs, column(rows, "time/default"), "o-", color=color, label=f"segmented ring, {p} ranks")
        plain = [r for r in t[("AllreduceRing", p)] if r["size (B)"] == "16777216"]
        if plain:
            ratio = pb.cell_number(plain[0]["time/default"])
            ax.axhline(ratio, linestyle=":", color=color, label=f"unsegmented ring, 16 MiB, {p} ranks: {ratio:.2f}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    pb.size_axis(ax, segs, every=1)
    ax.set_xlabel("segment size")
    ax.set_ylabel("time / Open MPI default (median of per-pair ratios)")
    ax.set_yscale("log", base=2)
    ax.set_yticks([0.75, 1, 1.5, 2, 3, 4, 5])
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_title("SegmentSweep: a 16 MiB allreduce, segment size swept")
    ax.legend(fontsize=8.5)
    fig.suptitle(SOURCE, fontsize=7.5, color="dimgray")
    pb.save(fig, out_dir, "segment_sweep.png")


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "labs/03_ring_allreduce/bench/RESULTS.md")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "figures")
    os.makedirs(out_dir, exist_ok=True)
    t = load(results)
    plot_time(t, out_dir)
    plot_ratio(t, out_dir)
    plot_busbw(t, out_dir)
    plot_sweep(t, out_dir)


if __name__ == "__main__":
    main()
