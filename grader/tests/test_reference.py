"""`grade.py 01 --reference`: the reference solution gets full marks (100 / 100 with
the example hidden tests), every item passes, and the Gradescope JSON has every
required key with the right type and the rubric's items and points."""
import sys
import tomllib
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


def rubric_points() -> dict[str, float]:
    """Item name -> points, from grader/rubrics/01.toml and the example hidden rubric."""
    points = {}
    for path in (helpers.ROOT / "grader" / "rubrics" / "01.toml", helpers.HIDDEN_EXAMPLE / "rubric.toml"):
        data = tomllib.loads(path.read_text())
        for item in data["item"] + data.get("perf", []):
            points[item["name"]] = float(item["points"])
    return points


class TestReference(helpers.GraderAssertions, unittest.TestCase):
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade_reference()

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])

    def test_full_marks(self):
        self.assertEqual(self.graded.json["score"], 100 - self.graded.speed_out())
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())

    def test_every_item_passed(self):
        # 9 rubric items + 1 speed item + 2 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 12)
        self.assertFullMarks(self.graded.json["tests"])
        for t in self.graded.json["tests"]:
            if t["name"].startswith("Speed:"):
                self.assertRegex(t["output"], r"submission/reference = \d+\.\d\d \(median of \d+ pairs at 2 ranks")
                self.assertRegex(t["output"], r"the reference against itself differed by up to \d+\.\d\dx")
            else:
                self.assertTrue(t["output"].startswith("passed at "), t["output"])

    def test_json_keys_and_types(self):
        self.assertGradescopeJson(self.graded)
        self.assertGreater(self.graded.json["execution_time"], 0)
        self.assertLessEqual(self.graded.json["execution_time"], self.graded.seconds + 1)

    def test_items_are_the_rubrics(self):
        got = {t["name"]: t["max_score"] for t in self.graded.json["tests"]}
        self.assertEqual(got, rubric_points())
        visibility = {t["name"]: t["visibility"] for t in self.graded.json["tests"]}
        halo = "Hidden: halo exchange at 5 and 6 ranks: other tags, pieces, halos and communicators"
        self.assertEqual(visibility[halo], "after_published")
        self.assertEqual(visibility["B. ring: large messages without deadlock"], "visible")

    def test_printed_table(self):
        self.assertIn("Grading lab 01 (01_point_to_point): the reference solution", self.graded.output)
        total = f"{100 - self.graded.speed_out():g}"
        self.assertRegex(self.graded.output, rf"TOTAL\s+{total} / {total}")
        self.assertNotIn("What went wrong", self.graded.output)


if __name__ == "__main__":
    unittest.main()
