"""Lab 06 end to end: `grade.py 06 --reference` gives 110 / 110 (100 public points
and 10 example hidden ones, no GPU item); `--skeleton` gives 0 fast, every item
saying what is not implemented yet."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestLab06Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="06")

    def test_full_marks(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 110)
        self.assertEqual(self.graded.json["max_score"], 110)
        # 10 public items + 2 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 12)
        self.assertFullMarks(self.graded.json["tests"])


class TestLab06Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="06")

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
