#!/usr/bin/env python3
"""Figures for the lab 01 deck, from a real run of the lab 01 benchmark.

Reads the Google Benchmark JSON a dtlabs benchmark writes and draws, into OUT_DIR:
  pingpong_time.png       PingPong one-way time vs size (log-log): ping_pong() (time_us)
                          and plain MPI_Send/MPI_Recv (vendor_us), the alpha-beta fits
                          over all sizes and over sizes >= 8 KiB, the 4 KiB eager limit;
  pingpong_bandwidth.png  PingPong bandwidth (GB/s) vs size (log x);
  ringshift_time.png      one ring_shift() beside one MPI_Sendrecv, time vs size.
The fit is fit_alpha_beta()'s (reference/01_point_to_point/src/alpha_beta.cc): least
squares for t = alpha + beta * n with weights 1/t^2. Needs Python 3 and matplotlib.

From the repository root (the JSON lands in the current directory):
    ./dtl bench 01 -- --benchmark_out=bench01.json --benchmark_out_format=json
    python3 slides/plot_bench.py bench01.json slides/01_point_to_point/figures
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

EAGER_LIMIT = 4096  # btl_vader_eager_limit of Open MPI 4.1.4, header included


def load_rows(path):
    """({"PingPong": [row, ...], "RingShift": [...]}, each sorted by size), whose code ran."""
    with open(path) as f:
        doc = json.load(f)
    # ./dtl bench 01 --student runs lab01_student_bench (your src/), else the reference.
    who = "yours" if "_student_bench" in doc["context"].get("executable", "") else "reference"
    rows = {}
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue  # skip aggregates (mean/median of repetitions) and skipped rows
        rows.setdefault(b["name"].split("/")[0], []).append(b)
    for family in rows.values():
        family.sort(key=lambda b: b["bytes"])
    return rows, who


def fit_alpha_beta(sizes, times):
    """Weighted least squares (w = 1/t^2) for t = alpha + beta * n.

    Normal equations:  [S  Sn ] [alpha]   [St ]
                       [Sn Snn] [beta ] = [Snt]
    with S = sum w, Sn = sum w n, Snn = sum w n^2, St = sum w t, Snt = sum w n t.
    """
    w = [1.0 / (t * t) for t in times]
    s = sum(w)
    sn = sum(wi * n for wi, n in zip(w, sizes))
    snn = sum(wi * n * n for wi, n in zip(w, sizes))
    st = sum(wi * t for wi, t in zip(w, times))
    snt = sum(wi * n * t for wi, n, t in zip(w, sizes, times))
    det = s * snn - sn * sn
    alpha = (snn * st - sn * snt) / det
    beta = (s * snt - sn * st) / det
    return alpha, beta


def read_markdown_tables(path):
    """The pipe tables of a Markdown file (a lab's bench/RESULTS.md), in file order.

    Returns a list of (heading, header, rows): heading is the text of the last `#`
    heading above the table, header the list of column names, rows lists of cell
    strings (the |---| line is dropped). Used by the decks' make_figures.py scripts.
    """
    tables, heading, block = [], "", []

    def flush():
        if len(block) >= 2:
            cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block]
            tables.append((heading, cells[0], [r for r in cells[2:] if len(r) == len(cells[0])]))
        block.clear()

    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("|"):
                block.append(line)
                continue
            flush()
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
    flush()
    return tables


def parse_size(text):
    """'64 KiB' -> 65536, '8 B' -> 8, '1 MiB' -> 1048576, '4096' -> 4096."""
    value, _, unit = text.strip().partition(" ")
    scale = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit.strip()]
    return int(float(value) * scale)


def cell_number(text):
    """A table cell as a float; None for '-' or an empty cell. Strips ** and units."""
    text = text.replace("**", "").strip()
    if text in ("", "-", "—"):
        return None
    return float(text.split()[0])


def size_label(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:.0f} B"


def size_axis(ax, sizes, every=2):
    """Log2 x axis labelled with sizes (every `every`-th power of two); plain y numbers."""
    ax.set_xscale("log", base=2)
    ticks = [n for n in sizes if (n.bit_length() - 1) % every == 0] or sizes
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(n) for n in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.grid(True, which="major", alpha=0.3)


def save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    print("wrote", path)


def plot_pingpong(rows, who, out_dir):
    sizes = [int(b["bytes"]) for b in rows]
    impl = [b["time_us"] for b in rows]
    vendor = [b["vendor_us"] for b in rows]
    fits = []  # (label, sizes fitted, alpha in us, beta in us per byte)
    for label, lo in (("all sizes", 0), (">= 8 KiB", 8192)):
        pts = [(n, t) for n, t in zip(sizes, impl) if n >= lo]
        if len(pts) >= 2:
            ns = [n for n, _ in pts]
            fits.append((label, ns, *fit_alpha_beta(ns, [t for _, t in pts])))
    for label, _, alpha, beta in fits:
        print(f"fit {label:>9}: alpha = {alpha:.3f} us   beta = {beta * 1e3:.4f} ns/B   "
              f"1/beta = {1e-3 / beta:.2f} GB/s   n_1/2 = {alpha / beta:.0f} B")

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(sizes, impl, "o", color="C0", label=f"ping_pong() ({who})")
    ax.loglog(sizes, vendor, "x", color="C1", ms=8, label="MPI_Send/MPI_Recv")
    for (label, ns, alpha, beta), style in zip(fits, ("--", "-")):
        grid = [ns[0] * (ns[-1] / ns[0]) ** (i / 200) for i in range(201)]  # a smooth curve
        ax.loglog(grid, [alpha + beta * n for n in grid], style, color="gray",
                  label=f"fit, {label}: alpha = {alpha:.2f} us, 1/beta = {1e-3 / beta:.1f} GB/s")
    ax.axvline(EAGER_LIMIT, linestyle=":", color="C3", label="eager limit (4 KiB)")
    size_axis(ax, sizes)
    ax.set_ylabel("one-way time (us)")
    ax.set_title("PingPong, ranks 0 and 1: one-way time (half a round trip, median)")
    ax.legend(fontsize=9)
    save(fig, out_dir, "pingpong_time.png")

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(sizes, [b["GBps"] for b in rows], "o-", color="C0", label=f"ping_pong() ({who})")
    ax.plot(sizes, [n / t / 1e3 for n, t in zip(sizes, vendor)], "x--", color="C1", ms=8,
            label="MPI_Send/MPI_Recv")  # bytes per microsecond = MB/s
    if fits:
        label, _, _, beta = fits[-1]
        ax.axhline(1e-3 / beta, linestyle="--", color="gray",
                   label=f"1/beta of the fit over {label}: {1e-3 / beta:.1f} GB/s")
    ax.axvline(EAGER_LIMIT, linestyle=":", color="C3", label="eager limit (4 KiB)")
    size_axis(ax, sizes)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("bandwidth = bytes / one-way time (GB/s)")
    ax.set_title("PingPong, ranks 0 and 1: achieved bandwidth")
    ax.legend(fontsize=9)
    save(fig, out_dir, "pingpong_bandwidth.png")


def plot_ringshift(rows, who, out_dir):
    sizes = [int(b["bytes"]) for b in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.loglog(sizes, [b["time_us"] for b in rows], "o-", color="C0", label=f"ring_shift() ({who})")
    ax.loglog(sizes, [b["vendor_us"] for b in rows], "x--", color="C1", ms=8, label="one MPI_Sendrecv")
    size_axis(ax, sizes, every=1)
    ax.set_ylabel("time of one shift (us, median)")
    ax.set_title("RingShift: every rank sends right and receives from the left")
    ax.legend(fontsize=9)
    save(fig, out_dir, "ringshift_time.png")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: python3 slides/plot_bench.py BENCH_JSON OUT_DIR")
    rows, who = load_rows(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no benchmark rows")
    os.makedirs(sys.argv[2], exist_ok=True)
    if "PingPong" in rows:
        plot_pingpong(rows["PingPong"], who, sys.argv[2])
    if "RingShift" in rows:
        plot_ringshift(rows["RingShift"], who, sys.argv[2])


if __name__ == "__main__":
    main()
