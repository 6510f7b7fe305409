"""Grading one submission from start to end, and a batch of them.

grade_one() is the whole pipeline, in order: the pristine tree with the
submission's files (submission.py), the build and the include check (build.py),
the test runs (runner.py), the scores (score.py, perf.py) and the report
(report.py). It works in a fresh temporary folder and always returns a result: a
submission can only lower its score. grade_batch() grades every sub-folder of a
folder, one after the other.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from .build import build, compiler_errors, foreign_includes
from .lab import GraderError, Lab, binaries_for
from .perf import perf_rows
from .report import gradescope_results, print_report, totals, write_results, write_summary
from .runner import gpu_available, run_items
from .score import failed_rows, item_rows
from .submission import make_tree, submission_sources


def grade_one(lab: Lab, source: Path, description: str, hidden_dirs: list[Path], args) -> dict:
    """Grades one submission (the lab's src files in `source`); prints the table and
    returns Gradescope's results as a dict. A submission can only lower its score:
    whatever it does, this returns."""
    started = time.monotonic()
    print(f"Grading lab {lab.number} ({lab.name}): {description}", flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"dtl-grade-{lab.number}-"))
    log_lines: list[str] = []

    def log(text: str) -> None:
        log_lines.append(text)
        if args.verbose:
            print(text)

    try:
        tree = work / "tree"
        tree.mkdir()
        notes = make_tree(lab, source, tree, hidden_dirs, args)
        for note in notes:
            print(f"  note: {note}")
        has_hidden = any((tree / "grader" / "hidden" / lab.name).glob("*_test.cc"))
        gpu = gpu_available()
        binaries = binaries_for(lab, has_hidden, gpu)
        # GPU items stay without a GPU: they are listed as not gradable (score.py).
        items = [i for i in lab.items if i.binary in binaries or (i.gpu and not gpu)]
        # Performance items need the reference's benchmark beside the submission's:
        # not gradable in a repository without reference/ (a student's export).
        has_reference = (tree / "reference" / lab.name / "src").is_dir()
        targets = list(binaries.values())
        if lab.perf and has_reference:
            targets += [f"lab{lab.number}_student_bench", f"lab{lab.number}_bench"]

        print("  building ...", flush=True)
        made = build(lab, tree, work / "build", targets)
        foreign = foreign_includes(lab, tree, work / "build") if made.returncode == 0 else []
        if made.returncode != 0 or foreign:
            if foreign:
                why = "the submission includes files it may not use"
                errors = ("only the lab's src/ and include/, harness/, datasets/ and system headers may be "
                          "included; these are not:\n  " + "\n  ".join(foreign[:10]))
            else:
                why = "the build timed out" if made.timed_out else "the submission does not compile"
                errors = compiler_errors(made.output)
            print(f"  {why}; every item scores 0. {'The compiler said' if not foreign else 'Details'}:\n{errors}")
            rows = failed_rows(items + lab.perf, gpu, f"{why}:\n{errors}")
        else:
            print(f"  built in {made.seconds:.0f} s; running tests ...", flush=True)
            exe_dir = work / "build" / "labs" / lab.name
            runnable = [i for i in items if gpu or not i.gpu]
            by_run, names, listing = run_items(runnable, binaries, exe_dir, work, log)
            rows = item_rows(items, gpu, by_run, names, listing)
            passed = {r["name"] for r in rows if r["status"] == "passed"}
            rows += perf_rows(lab, passed, has_reference, exe_dir, work, log)
        total, max_total = totals(rows)
        print_report(lab, rows, total, max_total, sys.stdout)
        elapsed = time.monotonic() - started
        print(f"graded in {elapsed:.0f} s", flush=True)
        return gradescope_results(lab, rows, total, max_total, elapsed, notes)
    finally:
        if args.keep:
            (work / "run.log").write_text("\n".join(log_lines))
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def grade_batch(lab: Lab, folder: Path, out: Path, hidden_dirs: list[Path], args) -> int:
    """Grades every sub-folder of `folder` (a submission each, named by the folder),
    one after the other; writes out/NAME.json and out/summary.csv."""
    if not folder.is_dir():
        raise GraderError(f"--batch {folder}: not a folder")
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not submissions:
        raise GraderError(f"--batch {folder}: no sub-folders (one per submission) in it")
    out.mkdir(parents=True, exist_ok=True)
    graded: dict[str, dict] = {}
    for sub in submissions:
        args.submission = str(sub)
        source, description = submission_sources(lab, args)
        graded[sub.name] = grade_one(lab, source, description, hidden_dirs, args)
        write_results(out / f"{sub.name}.json", graded[sub.name])
    write_summary(out / "summary.csv", graded)
    print(f"\ngraded {len(submissions)} submissions; results in {out}/ (summary.csv, NAME.json)")
    return 0
