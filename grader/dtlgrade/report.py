"""What a grading reports: the terminal table, Gradescope's results.json, the
batch summary.

Every item's result is a row, a dict with Gradescope's fields: name, ranks,
score, max_score, status ("passed", "failed", or "not gradable ..." / "too noisy
..." for an item left out of the total), visibility and output; a speed item's
also `speed` (a line for the table) and `extra_data` (its numbers, for the JSON). print_report() prints the table
and each failed item's first problem; gradescope_results() makes results.json,
one test per row (test_entry()); write_summary() writes a batch's summary.csv.
"""
from __future__ import annotations

import json
from pathlib import Path

from .lab import Lab


def totals(rows: list[dict]) -> tuple[float, float]:
    """(score, max_score) of the whole grading."""
    return round(sum(r["score"] for r in rows), 2), round(sum(r["max_score"] for r in rows), 2)


def print_table(lab: Lab, rows: list[dict], total: float, max_total: float, out) -> None:
    width = max([len(r["name"]) for r in rows] + [20])
    print(f"\nLab {lab.number} — {lab.title}", file=out)
    print(f"{'item':<{width}}  {'ranks':<10} {'points':>11}  status", file=out)
    for r in rows:
        pts = f"{r['score']:g} / {r['max_score']:g}"
        speed = f"  ({r['speed']})" if r.get("speed") else ""  # a speed item's ratio and noise (perf.py)
        print(f"{r['name']:<{width}}  {r['ranks']:<10} {pts:>11}  {r['status']}{speed}", file=out)
    print(f"{'TOTAL':<{width}}  {'':<10} {f'{total:g} / {max_total:g}':>11}", file=out)


def print_report(lab: Lab, rows: list[dict], total: float, max_total: float, out) -> None:
    """The table, then the first problem of each failed item (up to 1500 characters)."""
    print_table(lab, rows, total, max_total, out)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        print("\nWhat went wrong (first problem of each item):", file=out)
        for r in failed:
            first = r["output"].split("\n\n")[0]
            print(f"--- {r['name']}\n{first[:1500]}", file=out)


def test_entry(row: dict) -> dict:
    """One Gradescope test. An item not gradable here (a GPU item without a GPU, a
    speed item with more ranks than cores or too noisy to grade) has no status, so
    Gradescope shows it as neither passed nor failed, with the reason."""
    entry = {"name": row["name"], "score": row["score"], "max_score": row["max_score"],
             "output": row["output"], "visibility": row["visibility"]}
    if row["status"] in ("passed", "failed"):
        entry["status"] = row["status"]
    if row.get("extra_data"):  # a speed item's measurement: ratio, the reference's spread, pairs, ranks, cores
        entry["extra_data"] = row["extra_data"]
    return entry


def gradescope_results(lab: Lab, rows: list[dict], total: float, max_total: float, seconds: float,
                       notes: list[str]) -> dict:
    """Gradescope's results.json, as a dict: one test per rubric item; the grader's
    printed log is hidden from students."""
    return {
        "score": total, "max_score": max_total, "execution_time": round(seconds, 1),
        "output": f"Lab {lab.number} ({lab.title}): {total:g} / {max_total:g}. " + " ".join(notes),
        "visibility": "visible", "stdout_visibility": "hidden",
        "tests": [test_entry(r) for r in rows],
    }


def write_results(path: Path, results: dict) -> None:
    path.write_text(json.dumps(results, indent=2) + "\n")


def write_summary(path: Path, results: dict[str, dict]) -> None:
    """A batch's summary.csv: one line per submission (by name) with its score,
    max score and grading time."""
    lines = ["submission,score,max_score,seconds"]
    for name, r in results.items():
        lines.append(f"{name},{r['score']:g},{r['max_score']:g},{r['execution_time']:g}")
    path.write_text("\n".join(lines) + "\n")
