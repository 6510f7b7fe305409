"""Lab 05 end to end: `grade.py 05 --reference` gives 110 / 110 without a GPU
(100 public CPU points and 10 example hidden ones; the 5-point GPU item is
reported as "not gradable without a GPU" and left out of the total), 115 / 115
with one; `--skeleton` gives 0 fast, every item saying what is not implemented yet."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

sys.path.insert(0, str(helpers.ROOT / "grader"))
from dtlgrade.runner import gpu_available  # noqa: E402

HAVE_GPU = gpu_available()


def gradable(tests: list[dict]) -> list[dict]:
    """The items this machine grades: without a GPU, item D is reported, not scored."""
    return [t for t in tests if HAVE_GPU or "(GPU)" not in t["name"]]


class TestLab05Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="05")

    def test_full_marks_for_what_this_machine_can_grade(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 115 if HAVE_GPU else 110)
        self.assertEqual(self.graded.json["max_score"], 115 if HAVE_GPU else 110)
        # 9 CPU items + 1 GPU item + 2 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 12)
        self.assertFullMarks(gradable(self.graded.json["tests"]))


class TestLab05Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="05")

    def test_zero_fast(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        tests = gradable(self.graded.json["tests"])
        self.assertZero(tests)
        self.assertLess(self.graded.seconds, 90, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)
        for t in tests:
            self.assertIn("is not implemented yet", t["output"], t["name"])


if __name__ == "__main__":
    unittest.main()
