"""The command line of the grader: ./dtl grade NN [options] (grader/grade.py).

main() parses the options, finds the lab and its hidden test folders, and hands
over to grading.grade_one() (or grade_batch() for --batch). Exit status: 0 when a
score was produced, 0 points included; 2 for a problem with the grader's set-up
(GraderError: an unknown lab, a bad rubric, a path that is not a folder).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from . import process, progress, sandbox
from .grading import cleanup, grade_batch, grade_labs, grade_one
from .lab import ROOT, GraderError, find_lab, load_lab
from .report import write_results
from .submission import submission_sources


def on_signal(signum, frame) -> None:
    """SIGINT or SIGTERM (a batch script's timeout, Ctrl-C): kill every run in
    flight, remove the temporary trees, and exit 128 + the signal's number."""
    process.interrupt()
    cleanup()
    print(f"\ngrade: interrupted by signal {signum}: runs killed, temporary trees removed", file=sys.stderr,
          flush=True)
    os._exit(128 + signum)


def every_lab_number() -> list[str]:
    return sorted(p.name[:2] for p in (ROOT / "labs").glob("[0-9][0-9]_*") if p.is_dir())


def lab_and_hidden(number: str, args):
    """Lab `number` with its hidden test folders (grader/hidden/NN_topic unless
    --no-hidden, then every --hidden DIR)."""
    lab_name = find_lab(number)
    hidden_dirs = [] if args.no_hidden else [ROOT / "grader" / "hidden" / lab_name]
    hidden_dirs = [d for d in hidden_dirs if d.is_dir()] + [Path(h).resolve() for h in args.hidden]
    for d in hidden_dirs:
        if not d.is_dir():
            raise GraderError(f"--hidden {d}: not a folder")
    lab = load_lab(number, hidden_dirs)
    if args.budget is not None:
        if args.budget <= 0:
            raise GraderError(f"--budget {args.budget:g}: must be a positive number of seconds")
        lab.budget = args.budget
    return lab, hidden_dirs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dtl grade", description="Grade a lab: build the submission in a pristine tree, run the tests "
                                        "under MPI with timeouts, score the rubric, write Gradescope JSON.")
    parser.add_argument("lab", help="lab number, e.g. 01; with --reference or --skeleton also several, 01,03, "
                                    "or all: --jobs labs at a time up to their speed items, which then run one lab "
                                    "at a time")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--submission", metavar="DIR",
                       help="a folder with the lab's src files, or a checkout of the repository "
                            "(default: your own labs/NN_topic/src)")
    which.add_argument("--reference", action="store_true", help="grade the reference solution")
    which.add_argument("--skeleton", action="store_true", help="grade the untouched student skeleton")
    which.add_argument("--batch", metavar="DIR",
                       help="grade every folder in DIR as one submission (instructors); writes "
                            "OUT/NAME.json and OUT/summary.csv, OUT given by --out")
    parser.add_argument("--json", metavar="FILE", help="write Gradescope results.json here")
    parser.add_argument("--out", metavar="DIR", default="grades", help="with --batch: where results go "
                                                                      "(default: ./grades)")
    parser.add_argument("--jobs", metavar="N", type=int, default=1,
                        help="with --batch: grade N submissions at a time up to their speed items, which then run "
                             "one submission at a time with nothing else of the batch running (default: 1, "
                             "one submission after the other)")
    parser.add_argument("--hidden", metavar="DIR", action="append", default=[],
                        help="more hidden tests: a folder of *_test.cc files and a rubric.toml (repeatable)")
    parser.add_argument("--no-hidden", action="store_true", help="skip the example hidden tests in grader/hidden")
    parser.add_argument("--keep", action="store_true", help="keep the pristine build folder and print its path")
    parser.add_argument("--verbose", action="store_true", help="print every test run's output")
    parser.add_argument("--no-prebuilt", action="store_true",
                        help="configure and build the whole pristine tree, as before the course's objects were "
                             "prebuilt (slower; to compare, or to rule the prebuilt objects out)")
    parser.add_argument("--budget", metavar="SECONDS", type=float,
                        help="seconds for all test runs of one grading (default: the rubric's budget)")
    parser.add_argument("--fail-under", metavar="PERCENT", type=float,
                        help="exit 1 when the score is below PERCENT of the points (CI: 100 passes only with full "
                             "marks; GitHub Classroom's command grader scores a step by its exit status)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run the submission without bubblewrap: only where namespaces are refused (some "
                             "containers) and only for code you trust; the results say so")
    args = parser.parse_args(argv)
    every_lab = args.lab == "all" or "," in args.lab
    if every_lab and not (args.reference or args.skeleton):
        parser.error(f"{args.lab}: several labs' --reference or --skeleton (a submission is graded one lab at a time)")
    if every_lab and (args.json or args.fail_under is not None or args.keep):
        parser.error(f"{args.lab}: --json, --fail-under and --keep are for one lab")
    if args.jobs < 1 or (args.jobs > 1 and not (args.batch or every_lab)):
        parser.error(f"--jobs {args.jobs}: a number of submissions (or labs) at a time, 1 or more, with --batch "
                     "(or 'all')")
    if args.fail_under is not None and not 0 <= args.fail_under <= 100:
        parser.error(f"--fail-under {args.fail_under:g}: a percentage from 0 to 100")
    progress.ENABLED = not args.json  # a machine reads --json's results: no live status line
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if not args.no_sandbox:
        ok, why = sandbox.probe()
        if not ok:
            print(f"grade: the sandbox cannot run here: {why}.\nSubmissions are only run inside it. Where "
                  "namespaces are refused (some containers), grade with --no-sandbox, knowing that the "
                  "submission then runs with your rights.", file=sys.stderr)
            return 2

    try:
        if every_lab:
            numbers = every_lab_number() if args.lab == "all" else [n for n in args.lab.split(",") if n]
            return grade_labs([lab_and_hidden(each, args) for each in numbers], args)
        lab, hidden_dirs = lab_and_hidden(args.lab, args)
        if args.batch:
            return grade_batch(lab, Path(args.batch), Path(args.out), hidden_dirs, args)
        source, description = submission_sources(lab, args)
    except GraderError as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    results = grade_one(lab, source, description, hidden_dirs, args)
    if args.json:
        write_results(Path(args.json), results)
        print(f"wrote {args.json}")
    if args.fail_under is not None:
        score, points = results["score"], results["max_score"]
        if points > 0 and 100.0 * score / points < args.fail_under - 1e-9:
            print(f"grade: {score:g} / {points:g} is below --fail-under {args.fail_under:g}%", file=sys.stderr)
            return 1
    return 0
