"""Batch grading (--batch DIR --out OUT): every sub-folder of DIR is one
submission, graded on its own; OUT gets NAME.json (Gradescope's format) per
submission and summary.csv with one line each, in name order."""
import csv
import json
import subprocess
import sys
import unittest
from pathlib import Path

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


if __name__ == "__main__":
    unittest.main()
