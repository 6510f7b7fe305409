"""Batch grading (--batch DIR --out OUT): every sub-folder of DIR is one
submission, graded on its own; OUT gets NAME.json (Gradescope's format) per
submission and summary.csv with one line each, in name order. A submission the
grader itself fails on is recorded as a "grader error" (0 points, saying so) and
the batch goes on (TestBatchGuard, with grade_one made to fail for one)."""
import argparse
import csv
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestBatch(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = helpers.temp_folder(cls)
        batch = tmp / "submissions"
        helpers.make_submission(batch / "alice")                                  # the reference: full marks
        helpers.make_submission(batch / "bob", source=helpers.SKELETON_SRC)       # the skeleton: 0
        (batch / ".hidden_folder").mkdir()                                        # not a submission
        cls.out = tmp / "grades"
        cls.proc = subprocess.run([sys.executable, str(helpers.GRADE_PY), helpers.LAB, "--batch", str(batch),
                                   "--out", str(cls.out), "--no-hidden"], cwd=helpers.ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=helpers.GRADE_TIMEOUT)

    def test_summary_has_one_line_per_submission(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-3000:])
        with open(self.out / "summary.csv") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([r["submission"] for r in rows], ["alice", "bob"])
        out = self.alice_speed_out()  # a speed item too noisy to grade leaves alice's total
        self.assertEqual([float(r["score"]) for r in rows], [90.0 - out, 0.0])
        self.assertEqual([float(r["max_score"]) for r in rows], [90.0 - out, 90.0])

    def alice_speed_out(self) -> float:
        return helpers.GradeRun(0, "", 1.0, json.loads((self.out / "alice.json").read_text())).speed_out()

    def test_each_submission_has_its_json(self):
        for name, score in (("alice", 90 - self.alice_speed_out()), ("bob", 0)):
            data = json.loads((self.out / f"{name}.json").read_text())
            self.assertGradescopeJson(helpers.GradeRun(0, "", 1.0, data))
            self.assertEqual(data["score"], score, name)


class TestBatchGuard(unittest.TestCase):
    def test_a_grader_error_is_recorded_and_the_batch_goes_on(self):
        from dtlgrade import grading
        from dtlgrade.lab import load_lab
        lab = load_lab("01", [])
        with tempfile.TemporaryDirectory() as tmp:
            batch, out = Path(tmp) / "batch", Path(tmp) / "out"
            for name in ("alice", "bob"):
                (batch / name).mkdir(parents=True)
            good = {"score": 1.0, "max_score": 90.0, "execution_time": 1.0, "tests": []}

            def grade_one(lab, source, description, hidden_dirs, args):
                if Path(args.submission).name == "alice":
                    raise KeyError("a parser the submission broke")
                return good

            with mock.patch.object(grading, "grade_one", grade_one), \
                    mock.patch.object(grading, "submission_sources", lambda lab, args: (Path(args.submission), "x")):
                self.assertEqual(grading.grade_batch(lab, batch, out, [], argparse.Namespace(submission=None)), 0)
            alice = json.loads((out / "alice.json").read_text())
            self.assertEqual(alice["score"], 0.0)
            self.assertIn("grader error", alice["output"])
            self.assertIn("KeyError", alice["tests"][0]["output"])
            self.assertEqual(json.loads((out / "bob.json").read_text())["score"], 1.0)
            with open(out / "summary.csv") as f:
                self.assertEqual([r["submission"] for r in csv.DictReader(f)], ["alice", "bob"])



class TestSeveralLabs(unittest.TestCase):
    """`grade.py 01,02 --skeleton --jobs 2` (how `./dtl demo` grades every lab's
    reference: `all`): both labs graded at once up to their speed items, then
    each lab's report in lab order, each the lab's own (0 for a skeleton)."""

    @classmethod
    def setUpClass(cls):
        args = [sys.executable, str(helpers.GRADE_PY), "01,02", "--skeleton", "--jobs", "2", "--no-hidden"]
        if not helpers.sandbox_works():
            args.append("--no-sandbox")
        cls.proc = subprocess.run(args, cwd=helpers.ROOT, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=helpers.GRADE_TIMEOUT)

    def test_each_lab_reported_in_order_with_its_own_total(self):
        out = self.proc.stdout
        self.assertEqual(self.proc.returncode, 0, out[-3000:])
        self.assertEqual(out.count("correctness graded"), 2, out[-3000:])
        first, second = out.index("################ lab 01"), out.index("################ lab 02")
        self.assertLess(first, second)
        self.assertIn("Grading lab 01 (01_point_to_point): the student skeleton", out[first:second])
        self.assertIn("Grading lab 02 (02_collectives): the student skeleton", out[second:])
        totals = [line.split()[1:4] for line in out.splitlines() if line.startswith("TOTAL")]
        self.assertEqual(len(totals), 2, out[-3000:])
        for score, slash, points in totals:
            self.assertEqual((score, slash), ("0", "/"), totals)
            self.assertGreater(float(points), 0)

    def test_several_labs_are_for_the_reference_or_the_skeleton_only(self):
        proc = subprocess.run([sys.executable, str(helpers.GRADE_PY), "01,02", "--submission", "."],
                              cwd=helpers.ROOT, text=True, capture_output=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("01,02: several labs' --reference or --skeleton", proc.stderr)


if __name__ == "__main__":
    unittest.main()
