"""Scoring the rubric items from the test results: all or nothing.

score_item() gives an item its points only if every test its patterns match
passed at every rank count it lists, and otherwise lists each problem (failed,
skipped, timed out, crashed, flooded, not run). item_rows() makes the rows of
the report and of Gradescope's JSON from that; a GPU item on a machine without a
GPU becomes not_gradable_row(), out of the total. failed_rows() is every row of
a submission that did not build.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from .lab import Item, PerfItem
from .runner import TestResult

TEST_OUTPUT_CAP = 4000              # characters of output kept per Gradescope test


def score_item(item: Item, by_run: dict[tuple[str, int], dict[str, TestResult]],
               names: dict[str, list[str]], listing: dict[str, str]) -> tuple[float, str, str]:
    """Returns (score, status, output) for one rubric item: all or nothing."""
    if not names[item.binary]:
        return 0.0, "failed", ("the test program did not start (it lists no tests); its output:\n" +
                               listing[item.binary][-2500:])
    matched = [n for n in names[item.binary] if any(fnmatchcase(n, p) for p in item.tests)]
    if not matched:
        return 0.0, "failed", "no test matches " + ", ".join(item.tests) + " (a grader set-up problem)"
    problems = []
    for np in sorted(item.ranks, key=lambda n: (n == 1, n)):  # the order they ran in
        for name in matched:
            result = by_run.get((item.binary, np), {}).get(name, TestResult("not_run", "not run"))
            if result.status != "passed":
                label = {"skipped": "SKIPPED", "timeout": "TIMEOUT", "crashed": "CRASHED", "flood": "OUTPUT FLOOD",
                         "not_run": "NOT RUN"}.get(result.status, "FAILED")
                problems.append(f"{label} {name} at {np} rank(s):\n{result.message.strip()}")
    if not problems:
        return item.points, "passed", f"passed at {', '.join(map(str, item.ranks))} rank(s)"
    text = "\n\n".join(problems)
    if len(text) > TEST_OUTPUT_CAP:
        suffix = f"\n... ({len(problems)} problems in all; output cut)"
        text = text[:TEST_OUTPUT_CAP - len(suffix)] + suffix
    return 0.0, "failed", text


def not_gradable_row(item: Item) -> dict:
    """The row of a GPU item on a machine without a GPU: its points leave the total."""
    return dict(name=item.name, ranks=",".join(map(str, item.ranks)), score=0.0,
                max_score=0.0, status="not gradable without a GPU", visibility=item.visibility,
                output=f"not gradable without a GPU: this item's {item.points:g} points "
                       "are left out of the total, not given as 0 or as full marks")


def item_rows(items: list[Item], gpu: bool, by_run: dict[tuple[str, int], dict[str, TestResult]],
              names: dict[str, list[str]], listing: dict[str, str]) -> list[dict]:
    """The rows of `items`, scored from the runs (run_items()'s results)."""
    rows = []
    for item in items:
        if item.gpu and not gpu:
            rows.append(not_gradable_row(item))
            continue
        score, status, output = score_item(item, by_run, names, listing)
        rows.append(dict(name=item.name, ranks=",".join(map(str, item.ranks)), score=score,
                         max_score=item.points, status=status, visibility=item.visibility,
                         output=output))
    return rows


def failed_rows(items: list[Item | PerfItem], gpu: bool, output: str) -> list[dict]:
    """Every item at 0 with the same `output` (why nothing ran), but a GPU item
    without a GPU, which stays out of the total."""
    rows = []
    for item in items:
        ranks = ",".join(map(str, item.ranks)) if isinstance(item, Item) else str(item.ranks)
        if isinstance(item, Item) and item.gpu and not gpu:
            rows.append(not_gradable_row(item))
            continue
        rows.append(dict(name=item.name, ranks=ranks, score=0.0,
                         max_score=item.points, status="failed", visibility=item.visibility,
                         output=output[:TEST_OUTPUT_CAP]))
    return rows
