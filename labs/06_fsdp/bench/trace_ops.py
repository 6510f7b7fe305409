#!/usr/bin/env python3
"""Reads a lab 06 trace (lab06_trace_fsdp*.json, written by ./dtl bench 06) and prints,
for every collective of the traced FSDP step, what the emulated 1GbE link's model
says it takes and what happened across the ranks:

  spread        the last rank's issue time minus the first rank's (how far apart the
                ranks reached the same collective);
  late          how long after its model end the operation completed, worst rank;
  after last    completion minus the last rank's issue (a real collective cannot
                finish before its last rank arrives);

then the sums, each rank's compute, and the share of the link's model time that
overlapped the issuing rank's compute (the number the benchmark prints itself).
Used for RESULTS.md, "Prefetch at 4 ranks". Usage: trace_ops.py TRACE.json [--ops]
"""
import collections
import json
import re
import sys

ALPHA, BANDWIDTH = 50e-6, 0.125e9  # emulated 1GbE: 50 us, 125 MB/s (harness/comm/emulated_communicator.cc)


def main():
    events = json.load(open(sys.argv[1]))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X"]
    world = 1 + max(e["pid"] for e in spans)

    def model_us(e):  # both collectives: (P - 1)(alpha + block / B), block = count x 4 bytes
        block = int(re.search(r"(\d+) x f32 per rank", e["args"]["description"]).group(1)) * 4
        return (world - 1) * (ALPHA + block / BANDWIDTH) * 1e6

    ops = collections.defaultdict(dict)
    seen = collections.Counter()
    for e in sorted((e for e in spans if e["tid"] == 1), key=lambda e: (e["pid"], e["ts"])):
        seen[(e["pid"], e["name"])] += 1
        ops[(e["name"], seen[(e["pid"], e["name"])])][e["pid"]] = e
    rows = []
    for (name, k), by_rank in ops.items():
        issues = [e["ts"] - float(e["args"]["queued_us"]) for e in by_rank.values()]
        model = model_us(next(iter(by_rank.values())))
        late = max(e["ts"] + e["dur"] - (e["ts"] + model) for e in by_rank.values())
        after = max(e["ts"] + e["dur"] for e in by_rank.values()) - max(issues)
        rows.append((min(issues), f"{name} #{k}", model, max(issues) - min(issues), late, after))
    rows.sort()
    if "--ops" in sys.argv:
        print(f"{'operation':>24} {'model':>8} {'spread':>8} {'late':>8} {'after last':>10}  (us)")
        for _, name, model, spread, late, after in rows:
            print(f"{name:>24} {model:8.0f} {spread:8.0f} {late:8.0f} {after:10.0f}")
    n_late = sum(1 for r in rows if r[4] > 100)
    print(f"{world} ranks, {len(rows)} operations: {n_late} ended > 0.1 ms after their model time; sums per step: "
          f"model {sum(r[2] for r in rows) / 1e3:.1f} ms, spread {sum(r[3] for r in rows) / 1e3:.1f} ms, "
          f"lateness {sum(max(0.0, r[4]) for r in rows) / 1e3:.1f} ms")
    hidden = total = 0.0
    for pid in range(world):
        compute = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in spans if e["pid"] == pid and e["tid"] == 2]
        fwd = sum(y - x for x, y, n in compute if n.startswith("forward")) / 1e3
        bwd = sum(y - x for x, y, n in compute if n.startswith("backward")) / 1e3
        print(f"  rank {pid}: forward {fwd:.1f} ms, backward {bwd:.1f} ms of compute")
        for e in spans:
            if e["pid"] != pid or e["tid"] != 1:
                continue
            a, b = e["ts"], e["ts"] + model_us(e)
            total += b - a
            hidden += sum(max(0.0, min(b, y) - max(a, x)) for x, y, _ in compute)
    print(f"link model time overlapped by the issuing rank's compute: {100 * hidden / total:.0f}%")


if __name__ == "__main__":
    main()
