"""A batch that resumes (grading.grade_batch(), dtlgrade/resume.py), in seconds: the
grading itself is replaced by a stand-in that records whom it graded.

- Interrupted after two of four submissions (the stand-in raises KeyboardInterrupt,
  as Ctrl-C does), a second run grades only the other two; summary.csv has all four.
- A results file cut short, a submission edited since, and a grader error are
  graded again; a finished one whose results file was replaced is too.
- With --jobs 2 (forked gradings), only the unfinished submissions are graded.
- Each finished submission prints a progress line with the count and an ETA.
"""
import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402,F401  (puts grader/ on sys.path)

from dtlgrade import grading, resume  # noqa: E402
from dtlgrade.lab import load_lab  # noqa: E402

NAMES = ["alice", "bob", "carol", "dave"]


def results_of(name: str) -> dict:
    return {"score": float(len(name)), "max_score": 90.0, "execution_time": 1.0, "output": name,
            "tests": [{"name": "item", "score": float(len(name)), "max_score": 90.0, "output": "",
                       "visibility": "visible", "status": "passed"}]}


class StandIn:
    """grade_one() for grade_batch(): records whom it graded; raises
    KeyboardInterrupt at `interrupt_at` (a name), KeyError at `fail_at`."""

    def __init__(self, interrupt_at: str | None = None, fail_at: str | None = None):
        self.graded, self.interrupt_at, self.fail_at = [], interrupt_at, fail_at

    def __call__(self, lab, source, description, hidden_dirs, args):
        name = Path(args.submission).name
        if name == self.interrupt_at:
            raise KeyboardInterrupt
        if name == self.fail_at:
            raise KeyError("a parser the submission broke")
        self.graded.append(name)
        return results_of(name)


def run_batch(batch: Path, out: Path, stand_in: StandIn, jobs: int = 1) -> str:
    """Runs grade_batch on lab 01 with `stand_in` as grade_one; returns what it printed."""
    printed = []
    with mock.patch.object(grading, "grade_one", stand_in), \
            mock.patch.object(grading, "submission_sources", lambda lab, args: (Path(args.submission), "x")), \
            mock.patch("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a)))):
        grading.grade_batch(load_lab("01", []), batch, out, [], argparse.Namespace(submission=None, jobs=jobs))
    return "\n".join(printed)


class TestResume(unittest.TestCase):
    def setUp(self):
        tmp = Path(tempfile.mkdtemp(prefix="dtl-resume-test-"))
        self.addCleanup(shutil.rmtree, tmp)
        self.batch, self.out = tmp / "batch", tmp / "out"
        for name in NAMES:
            (self.batch / name).mkdir(parents=True)
            (self.batch / name / "ring.cc").write_text(f"// {name}\n")

    def run_batch(self, stand_in: StandIn, jobs: int = 1) -> str:
        return run_batch(self.batch, self.out, stand_in, jobs)

    def summary(self) -> list[str]:
        with open(self.out / "summary.csv") as f:
            return [r["submission"] for r in csv.DictReader(f)]

    def test_interrupted_then_resumed_grades_only_the_rest(self):
        first = StandIn(interrupt_at="carol")
        with self.assertRaises(KeyboardInterrupt):
            self.run_batch(first)
        self.assertEqual(first.graded, ["alice", "bob"])
        self.assertFalse((self.out / "carol.json").exists())
        second = StandIn()
        printed = self.run_batch(second)
        self.assertEqual(second.graded, ["carol", "dave"])
        self.assertIn("resuming: 2 of 4 submissions were graded by an earlier run", printed)
        self.assertEqual(self.summary(), NAMES)
        for name in NAMES:
            self.assertEqual(json.loads((self.out / f"{name}.json").read_text()), results_of(name))
        third = StandIn()
        self.run_batch(third)
        self.assertEqual(third.graded, [], "everything finished: nothing graded again")

    def test_half_written_edited_and_failed_ones_are_graded_again(self):
        self.run_batch(StandIn(fail_at="dave"))
        self.assertIn("grader error", (self.out / "dave.json").read_text())
        text = (self.out / "alice.json").read_text()
        (self.out / "alice.json").write_text(text[: len(text) // 2])   # cut short
        (self.batch / "bob" / "ring.cc").write_text("// bob, resubmitted\n")  # edited since
        again = StandIn()
        self.run_batch(again)
        self.assertEqual(again.graded, ["alice", "bob", "dave"])
        self.assertEqual(json.loads((self.out / "alice.json").read_text()), results_of("alice"))

    def test_results_replaced_by_hand_are_graded_again(self):
        self.run_batch(StandIn())
        (self.out / "carol.json").write_text(json.dumps(results_of("someone else")))
        again = StandIn()
        self.run_batch(again)
        self.assertEqual(again.graded, ["carol"])

    def test_jobs_grade_only_the_unfinished(self):
        self.out.mkdir()
        resume.record(self.out, "alice", results_of("alice"), resume.fingerprint(self.batch / "alice", "01", []))
        resume.record(self.out, "carol", results_of("carol"), resume.fingerprint(self.batch / "carol", "01", []))
        graded_in_children = self.out.parent / "graded-in-children"
        graded_in_children.mkdir()

        def correctness(lab, source, description, hidden_dirs, args, hold=None):  # runs in a forked child
            (graded_in_children / Path(args.submission).name).touch()
            return grading.Graded([dict(name="item", ranks="1", score=1.0, max_score=90.0, status="failed",
                                        visibility="visible", output="")], [], [], time.monotonic())

        with mock.patch.object(grading, "grade_correctness", correctness):
            printed = self.run_batch(StandIn(), jobs=2)
        self.assertEqual(sorted(p.name for p in graded_in_children.iterdir()), ["bob", "dave"])
        self.assertEqual(self.summary(), NAMES)
        self.assertEqual(json.loads((self.out / "alice.json").read_text()), results_of("alice"))
        self.assertEqual(json.loads((self.out / "bob.json").read_text())["score"], 1.0)
        self.assertRegex(printed, r"\] 4/4 graded \(2 kept from before\), .* done: (bob|dave) graded")


class TestProgressLines(unittest.TestCase):
    def test_each_submission_prints_the_bar_and_an_eta(self):
        now = [1000.0]

        class ThirtySeconds(StandIn):  # each grading takes 30 s of the (fake) clock
            def __call__(self, *args):
                now[0] += 30
                return super().__call__(*args)

        with tempfile.TemporaryDirectory() as tmp:
            batch = Path(tmp) / "batch"
            for name in NAMES:
                (batch / name).mkdir(parents=True)
            with mock.patch.object(grading.progress.time, "monotonic", lambda: now[0]):
                printed = run_batch(batch, Path(tmp) / "out", ThirtySeconds())
        lines = [line for line in printed.splitlines() if line.startswith("[")]
        self.assertEqual(len(lines), 5, printed)  # before the first, then after each of the four
        self.assertEqual(lines[0], "[..............................] 0/4 graded, 0 s so far, "
                                   "ETA unknown until the first finishes")
        self.assertEqual(lines[1], "[#######.......................] 1/4 graded, 30 s so far, ETA 1 min 30 s: "
                                   "alice graded")
        self.assertEqual(lines[3], "[######################........] 3/4 graded, 1 min 30 s so far, ETA 30 s: "
                                   "carol graded")
        self.assertEqual(lines[4], "[##############################] 4/4 graded, 2 min 00 s so far, done: dave graded")


if __name__ == "__main__":
    unittest.main()
