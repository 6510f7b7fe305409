"""Lab 04 end to end: `grade.py 04 --reference` gives 110 / 110 (100 public, 10
example hidden), with lab 03's reference ring as the ring backend; `--skeleton`
gives 0 fast, every item saying what is not implemented yet."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestLab04Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="04")

    def test_full_marks(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 110)
        self.assertEqual(self.graded.json["max_score"], 110)
        self.assertFullMarks(self.graded.json["tests"])


class TestLab04Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="04")

    def test_zero_fast(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertZero(self.graded.json["tests"])
        self.assertLess(self.graded.seconds, 90, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)
        for t in self.graded.json["tests"]:
            self.assertIn("is not implemented yet", t["output"], t["name"])


if __name__ == "__main__":
    unittest.main()
