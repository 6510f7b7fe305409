"""Lab 02 end to end: `grade.py 02 --reference` gives 100 / 100 (every item
passed, the speed item measured against itself), and `grade.py 02 --skeleton`
gives 0 / 100 within 60 s, each item's output naming a function that "is not
implemented yet" (or, for the speed item, waiting for a correct broadcast)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestLab02Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="02")

    def test_full_marks(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        # the speed item runs at 3 ranks: "not gradable here" on fewer cores, out of the total
        self.assertEqual(self.graded.json["score"], 100 - self.graded.speed_out())
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())
        # 7 rubric items + 1 speed item + 2 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 10)
        self.assertFullMarks(self.graded.json["tests"])
        total = f"{100 - self.graded.speed_out():g}"
        self.assertRegex(self.graded.output, rf"TOTAL\s+{total} / {total}")


class TestLab02Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="02")

    def test_zero_fast(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())
        self.assertZero([t for t in self.graded.json["tests"] if not helpers.speed_left_out(t)])
        self.assertLess(self.graded.grading_seconds, 60, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)

    def test_outputs_say_what_is_missing(self):
        for t in self.graded.json["tests"]:
            if t["name"].startswith("Speed:"):
                if not helpers.speed_left_out(t):
                    self.assertIn("speed counts only for a correct solution", t["output"], t["name"])
            else:
                self.assertIn("is not implemented yet", t["output"], t["name"])


if __name__ == "__main__":
    unittest.main()
