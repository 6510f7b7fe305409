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
        self.assertReferenceFullMarks(self.graded, 110, items=15)  # 12 public items + 3 example hidden items


class TestLab06Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="06")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


if __name__ == "__main__":
    unittest.main()
