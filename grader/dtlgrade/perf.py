"""Performance items: the submission's benchmark beside the reference's.

For each [[perf]] item, score_perf() runs the benchmark row `runs` times against
the submission (labNN_student_bench) and against the reference (labNN_bench), in
pairs whose order alternates, and scores the median of the per-pair ratios
(bench_value() is one run of one row). perf_rows() makes the items' rows: scored
only once the items they require have passed, left out of the total when the
reference's own run fails or there is no reference/ to compare with.
"""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from .channel import KeyHandover, read_records
from .lab import Lab, PerfItem
from .process import run_mpi


def bench_value(binary: Path, item: PerfItem, work: Path, log) -> tuple[float | None, str]:
    """One run of one benchmark row; returns (the counter's value, or None, and why not).
    The value comes from the row's record sealed with the run's key (channel.py),
    not from --benchmark_out, which the code under test could rewrite."""
    run_dir = Path(tempfile.mkdtemp(prefix="bench-", dir=work))
    records = run_dir / "records.jsonl"
    handover = KeyHandover(run_dir, [item.bench])
    row = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", item.bench)  # POSIX regex: no "\ " escapes
    args = ["--oversubscribe", "--bind-to", "none", "-n", str(item.ranks), str(binary),
            f"--benchmark_filter=^{row}(/|$)", "--dtl_quick"]  # fewer iterations per run; the grader repeats the runs instead
    with handover:
        run = run_mpi(args, run_dir, 120, dict(DTL_PROGRESS_FILE=str(records), **handover.env()))
    log(run.output)
    rows, untrusted = read_records(records, handover.key)
    shutil.rmtree(run_dir, ignore_errors=True)
    if untrusted is not None:
        return None, f"{item.bench}: REFUSED: the benchmark's results could not be authenticated ({untrusted})"
    if any(r["event"] == "begin" and r["world_size"] != item.ranks for r in rows):
        return None, f"{item.bench}: REFUSED: the benchmark ran at another number of ranks"
    for r in rows:
        if r["event"] != "row" or not re.match(f"^{re.escape(item.bench)}(/|$)", r["name"]):
            continue
        if r["error"] is not None:
            return None, f"{item.bench}: {r['error'] or 'error'}"
        if item.counter in r["counters"]:
            return float(r["counters"][item.counter]), ""
    why = "timed out" if run.timed_out else f"exit code {run.returncode}"
    return None, f"{item.bench}: no result ({why}); the end of the output:\n{run.output[-1500:]}"


def score_perf(item: PerfItem, student: Path, reference: Path, work: Path, log) -> tuple[float, str, str]:
    """Returns (score, status, output) for one speed item, from `runs` pairs of runs
    of the `student` and `reference` benchmarks; status "not gradable" when the
    reference gave no result."""
    ratios, lines = [], []
    for i in range(item.runs):
        order = [("submission", student), ("reference", reference)]
        if i % 2:
            order.reverse()
        got = {}
        for who, binary in order:
            value, why = bench_value(binary, item, work, log)
            if value is None and who == "reference":
                return 0.0, "not gradable", (f"the reference's benchmark did not give a result, so there is "
                                             f"nothing to compare with; left out of the total: {why}")
            if value is None:
                return 0.0, "failed", f"the submission's benchmark did not give a result: {why}"
            got[who] = value
        ratios.append(got["submission"] / got["reference"] if got["reference"] > 0 else float("inf"))
        lines.append(f"  pair {i + 1}: submission {got['submission']:.2f}, reference {got['reference']:.2f} "
                     f"({item.counter}), ratio {ratios[-1]:.2f}")
    ratio = sorted(ratios)[len(ratios) // 2]
    share = min(1.0, max(0.0, (item.zero_at - ratio) / (item.zero_at - item.full_at)))
    score = round(item.points * share, 2)
    summary = (f"{item.bench}: submission/reference = {ratio:.2f} (median of {item.runs} paired runs at "
               f"{item.ranks} ranks; full points at <= {item.full_at:g}, none at >= {item.zero_at:g})\n"
               + "\n".join(lines))
    return score, "passed" if share == 1.0 else "failed", summary


def perf_rows(lab: Lab, passed: set[str], has_reference: bool, exe_dir: Path, work: Path, log) -> list[dict]:
    """The rows of the lab's speed items; `passed`: the names of the items that passed."""
    rows = []
    for item in lab.perf:
        row = dict(name=item.name, ranks=str(item.ranks), max_score=item.points,
                   visibility=item.visibility)
        missing = [r for r in item.requires if r not in passed]
        if not has_reference:
            row.update(score=0.0, max_score=0.0, status="not gradable without the reference",
                       output="performance points compare with reference/, which this "
                              "repository does not have; they are left out of the total")
        elif missing:
            row.update(score=0.0, status="failed",
                       output="speed counts only for a correct solution; first pass: " + "; ".join(missing))
        else:
            t0 = time.monotonic()
            score, status, output = score_perf(item, exe_dir / f"lab{lab.number}_student_bench",
                                               exe_dir / f"lab{lab.number}_bench", work, log)
            row.update(score=score, status=status, output=output)
            if status == "not gradable":
                row["max_score"] = 0.0
            print(f"  perf   {item.bench} at {item.ranks} rank(s): {score:g}/{item.points:g} "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
        rows.append(row)
    return rows
