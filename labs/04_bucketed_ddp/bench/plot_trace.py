#!/usr/bin/env python3
"""Draws the two Chrome traces lab04_bench writes (one overlapped and one
bucketed step) as one picture: per rank, a "compute" row (forward, each unit's
backward, the wait in finish(), the optimizer) and a "comm" row (each bucket's
allreduce), on a common time axis in milliseconds.

usage: /usr/bin/python3 plot_trace.py [TRACE_DIR] [OUT.png]
  TRACE_DIR  where lab04_trace_overlapped.json and lab04_trace_bucketed.json are
             (default: build/bench-out, where `./dtl bench 04` writes them)
  OUT.png    default: trace.png beside this script
Needs matplotlib (Debian: python3-matplotlib, i.e. /usr/bin/python3)."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4c72b0", "backward": "#55a868", "wait": "#c44e52", "optimizer": "#8172b2",
          "bucket": "#dd8452"}


def color_of(name: str) -> str:
    for key, color in COLORS.items():
        if name.startswith(key):
            return color
    return "#999999"


def spans(path: Path):
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    events = [e for e in events if e.get("ph") == "X"]
    names = {}  # (pid, tid) -> thread name, from the metadata events
    for e in (data["traceEvents"] if isinstance(data, dict) else data):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    t0 = min(e["ts"] for e in events)
    return [(e["pid"], names.get((e["pid"], e["tid"]), str(e["tid"])), e["name"], (e["ts"] - t0) / 1e3,
             e["dur"] / 1e3) for e in events]


def main() -> int:
    default = Path(__file__).resolve().parents[3] / "build" / "bench-out"
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name("trace.png")
    modes = ["overlapped", "bucketed"]
    fig, axes = plt.subplots(len(modes), 1, figsize=(11, 5.5), sharex=True)
    end = 0.0
    for ax, mode in zip(axes, modes):
        rows = spans(folder / f"lab04_trace_{mode}.json")
        tracks = sorted({(pid, track) for pid, track, *_ in rows}, key=lambda k: (k[0], k[1] != "compute"))
        for y, (pid, track) in enumerate(tracks):
            for p, t, name, start, dur in rows:
                if (p, t) != (pid, track):
                    continue
                ax.barh(y, dur, left=start, height=0.7, color=color_of(name), edgecolor="black", linewidth=0.3)
                end = max(end, start + dur)
        ax.set_yticks(range(len(tracks)), [f"rank {pid} {track}" for pid, track in tracks])
        ax.invert_yaxis()
        step = max(start + dur for *_, start, dur in rows)
        ax.set_title(f"{mode}: one step, {step:.1f} ms (EMULATED 10GbE link, 4 MiB cap, 2 ranks)", fontsize=10)
    axes[-1].set_xlabel("time since the step began (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, ["forward", "backward (per unit)", "wait in finish()", "optimizer", "bucket allreduce"],
               loc="lower center", ncol=5, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
