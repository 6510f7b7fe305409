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
        self.assertReferenceFullMarks(self.graded, 110)


class TestLab04Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="04")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


if __name__ == "__main__":
    unittest.main()
