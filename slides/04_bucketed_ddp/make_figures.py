#!/usr/bin/env python3
"""Figures for the lab 04 deck, from the tables recorded in labs/04_bucketed_ddp/bench/RESULTS.md.

Draws, into slides/04_bucketed_ddp/figures/ (or OUT_DIR):
  step_by_cap.png      overlapped step and bucketed (non-overlapped) step vs bucket cap, one
                       panel per backend of the 2-rank table (emulated 10GbE, emulated 100GbE,
                       real mpi-thread, emulated 1GbE with batch 720), the naive row as a line;
  ratio_by_cap.png     ratio = overlapped / bucketed (median per pair) vs cap, 2 ranks and
                       4 ranks, with the 0.7 target;
  overlap_budget.png   emulated 10GbE, 4 MiB cap: the step in the F + B + C + O terms that
                       RESULTS.md's analysis of the 0.7x target uses (bucketed and perfect
                       overlap), beside the measured bucketed and overlapped medians.
The trace picture is not drawn here: it is labs/04_bucketed_ddp/bench/trace.png, drawn by
labs/04_bucketed_ddp/bench/plot_trace.py from the benchmark's trace JSON.

Every number comes from RESULTS.md: the two '| row | step (ms) | ...' tables (the 2-rank
table, and the one under the '4 ranks' heading), and for overlap_budget.png the line
'(F + max(B, C) + O) / (F + B + C + O) = (..) / (..)' of its analysis. No benchmark is run.
Needs Python 3 and matplotlib (/usr/bin/python3 on Debian); reuses slides/plot_bench.py's
table reader.

From the repository root:
    python3 slides/04_bucketed_ddp/make_figures.py [RESULTS_MD [OUT_DIR]]
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # slides/, for plot_bench

import plot_bench as pb  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

SOURCE = ("data: labs/04_bucketed_ddp/bench/RESULTS.md (2026-11-22), 2-core VM, Open MPI 4.1.4, no GPU; "
          "'emulated' = alpha-beta model of the link over real shared memory, not measured on that link")
TARGET = 0.7
# Panel order and colours; a backend is the part of a row's name before " / ".
BACKENDS = [
    ("emulated 10GbE", "C0"),
    ("emulated 100GbE", "C2"),
    ("mpi-thread", "C3"),
    ("emulated 1GbE, batch 720", "C4"),
]
TITLES = {
    "emulated 10GbE": "EMULATED 10GbE (batch 24)",
    "emulated 100GbE": "EMULATED 100GbE (batch 24)",
    "mpi-thread": "mpi-thread: real shared memory, not emulated (batch 24)",
    "emulated 1GbE, batch 720": "EMULATED 1GbE, batch 720 (30x)",
}


def load(path):
    """{ranks: {backend: {"naive": row, cap_mib: row, ...}}} from the '| row | step (ms) |' tables."""
    out = {}
    for heading, header, rows in pb.read_markdown_tables(path):
        if not header or header[0] != "row" or "ratio" not in header:
            continue
        ranks = 4 if heading.startswith("4 ranks") else 2
        for cells in rows:
            row = dict(zip(header, cells))
            backend, _, what = row["row"].rpartition(" / ")
            key = "naive" if what == "naive" else pb.parse_size(what.replace("cap ", "", 1)) / (1 << 20)
            out.setdefault(ranks, {}).setdefault(backend, {})[key] = row
    if 2 not in out:
        sys.exit(f"{path}: no '| row | step (ms) | ... | ratio |' table")
    return out


def caps_of(rows):
    return sorted(k for k in rows if k != "naive")


def num(row, column):
    return pb.cell_number(row[column])


def cap_axis(ax, caps):
    ax.set_xscale("log", base=2)
    ax.set_xticks(caps)
    ax.set_xticklabels([f"{c:g}" for c in caps])
    ax.minorticks_off()
    ax.set_xlabel("bucket cap (MiB); first bucket min(cap, 1 MiB)")
    ax.grid(True, alpha=0.3)


def plot_steps(t, out_dir):
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (backend, color) in zip(axes.flat, BACKENDS):
        rows = t[2].get(backend)
        if not rows:
            ax.set_visible(False)
            continue
        caps = caps_of(rows)
        over = [num(rows[c], "step (ms)") for c in caps]
        buck = [num(rows[c], "bucketed (ms)") for c in caps]
        ax.plot(caps, buck, "s--", color="gray", mfc="none", ms=8, label="bucketed: all allreduces after backward")
        ax.plot(caps, over, "o-", color=color, ms=7, label="overlapped: each bucket issued from grad_ready")
        for c, o, b in zip(caps, over, buck):  # the ratio on the side away from the bucketed point
            ax.annotate(rows[c]["ratio"].replace("**", ""), (c, o), textcoords="offset points",
                        xytext=(0, 9 if o >= b else -16), ha="center", fontsize=8.5, color=color)
        if "naive" in rows:
            naive = num(rows["naive"], "step (ms)")
            ax.axhline(naive, linestyle=":", color="black", linewidth=1,
                       label=f"naive: one allreduce per parameter, after backward ({naive:g} ms)")
        cap_axis(ax, caps)
        ax.set_ylim(0, max(buck + over) * 1.18)
        ax.set_ylabel("step time (ms, median, slowest rank)")
        ax.set_title(TITLES.get(backend, backend), fontsize=10.5)
        ax.legend(fontsize=8, loc="lower left")
    fig.suptitle("Lab 04, 2 ranks: one DDP step (forward, backward, finish(), SGD) vs bucket cap; "
                 "numbers at the points = ratio overlapped / bucketed (median per pair)\n" + SOURCE,
                 fontsize=9, color="dimgray")
    pb.save(fig, out_dir, "step_by_cap.png")


def plot_ratios(t, path, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, ranks in zip(axes, (2, 4)):
        table = t.get(ranks, {})
        all_caps = set()
        for backend, color in BACKENDS:
            rows = table.get(backend)
            if not rows:
                continue
            caps = caps_of(rows)
            all_caps.update(caps)
            label = TITLES.get(backend, backend).split(" (batch 24)")[0]
            ax.plot(caps, [num(rows[c], "ratio") for c in caps], "o-", color=color, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(TARGET, color="gray", linestyle="--", label=f"target: overlapped <= {TARGET} x bucketed")
        if all_caps:
            cap_axis(ax, sorted(all_caps))
        ax.set_title(f"{ranks} ranks" + (" (2 per core: the machine cannot keep up; recorded to show the limit)"
                                         if ranks == 4 else ""), fontsize=10)
        ax.set_ylim(0.6, 1.35)
    axes[0].set_ylabel("overlapped step / bucketed step (median of per-pair ratios)")
    terms = analysis_terms(path)
    if terms is not None:  # RESULTS.md's bound for emulated 10GbE at 2 ranks, whatever the cap
        f_, b, c, o = terms
        bound = (f_ + max(b, c) + o) / (f_ + b + c + o)
        axes[0].axhline(bound, color="C0", linestyle=":", linewidth=1.5,
                        label=f"EMULATED 10GbE, perfect overlap: (F + max(B, C) + O) / (F + B + C + O) = {bound:.2f}")
    axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower right", bbox_to_anchor=(1, 0.15))
    fig.suptitle(SOURCE, fontsize=8.5, color="dimgray")
    pb.save(fig, out_dir, "ratio_by_cap.png")


def analysis_terms(path):
    """F, B, C, O (ms) from '(F + max(B, C) + O) / (F + B + C + O) = (F + C + O) / (F + B + C + O)'."""
    with open(path, encoding="utf-8") as f:
        text = " ".join(f.read().split())
    n = r"([\d.]+)"
    m = re.search(r"\(F \+ max\(B, C\) \+ O\) / \(F \+ B \+ C \+ O\) = "
                  rf"\({n} \+ {n} \+ {n}\) / \({n} \+ {n} \+ {n} \+ {n}\)", text)
    if not m:
        return None
    f_, b, c, o = (float(m.group(i)) for i in (4, 5, 6, 7))
    return f_, b, c, o


def plot_budget(t, path, out_dir):
    terms = analysis_terms(path)
    row = t[2].get("emulated 10GbE", {}).get(4.0)
    if terms is None or row is None:
        print("skipped overlap_budget.png: no F/B/C/O line or no 'emulated 10GbE / cap 4 MiB' row in", path)
        return
    f_, b, c, o = terms
    bucketed, overlapped = num(row, "bucketed (ms)"), num(row, "step (ms)")
    exposed = num(row, "exposed (ms)")
    colors = {"F": "#4c72b0", "B": "#55a868", "C": "#dd8452", "O": "#8172b2"}
    # (y, [(term, start, length, dy, height)]); in the perfect overlap B and C run side by side.
    bars = [
        (3, [("F", 0, f_, 0, 0.66), ("B", f_, b, 0, 0.66), ("C", f_ + b, c, 0, 0.66), ("O", f_ + b + c, o, 0, 0.66)]),
        (2, [("F", 0, f_, 0, 0.66), ("B", f_, b, 0.17, 0.32), ("C", f_, c, -0.17, 0.32),
             ("O", f_ + max(b, c), o, 0, 0.66)]),
    ]
    fig, ax = plt.subplots(figsize=(11, 4.6))
    for y, parts in bars:
        for term, start, length, dy, height in parts:
            ax.barh(y + dy, length, left=start, height=height, color=colors[term], edgecolor="black", linewidth=0.5)
            ax.text(start + length / 2, y + dy, f"{term} {length:g}", ha="center", va="center", fontsize=8.5,
                    color="white")
        total = max(start + length for _, start, length, _, _ in parts)
        ax.text(total + 0.3, y, f"{total:.1f} ms", va="center", fontsize=9)
    ax.barh(1, bucketed, color="#bbbbbb", edgecolor="black", linewidth=0.5, height=0.66)
    ax.text(bucketed + 0.3, 1, f"{bucketed:g} ms", va="center", fontsize=9)
    ax.barh(0, overlapped, color="#dddddd", edgecolor="black", linewidth=0.5, height=0.66)
    ax.barh(0, exposed, left=overlapped - o - exposed, color="#c44e52", height=0.66,
            edgecolor="black", linewidth=0.5)
    ax.text(overlapped - o - exposed / 2, 0, f"wait\n{exposed:g}", ha="center", va="center", fontsize=7.5,
            color="white")
    bound = (f_ + max(b, c) + o) / (f_ + b + c + o)
    ax.text(overlapped + 0.3, 0, f"{overlapped:g} ms; red: exposed = the wait in finish()\n"
            f"(ratio {row['ratio']}; perfect overlap {bound:.2f})", va="center", fontsize=9)
    ax.set_yticks([3, 2, 1, 0])
    ax.set_yticklabels(["model: bucketed\nF + B + C + O", "model: perfect overlap\nF + max(B, C) + O",
                        "measured: bucketed\n(median)", "measured: overlapped\n(median)"], fontsize=9)
    ax.set_xlim(0, (f_ + b + c + o) * 1.3)
    ax.set_xlabel("ms")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in "FBCO"]
    ax.legend(handles, ["F forward", "B backward", "C EMULATED 10GbE allreduce of all gradients", "O optimizer"],
              fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4)
    ax.set_title("EMULATED 10GbE, 4 MiB cap, 2 ranks: the most overlap can win, and what it won", fontsize=10.5)
    fig.suptitle("F, B, C, O: RESULTS.md's analysis of the 0.7x target; measured bars: its table (row 'emulated "
                 "10GbE / cap 4 MiB').\n" + SOURCE, fontsize=8, color="dimgray")
    pb.save(fig, out_dir, "overlap_budget.png")


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "labs/04_bucketed_ddp/bench/RESULTS.md")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "figures")
    os.makedirs(out_dir, exist_ok=True)
    t = load(results)
    plot_steps(t, out_dir)
    plot_ratios(t, results, out_dir)
    plot_budget(t, results, out_dir)


if __name__ == "__main__":
    main()
