"""Lab 03 end to end. `grade.py 03 --reference` gives 110 / 110 for part 1 and
part 2's task G2 (graded from its CPU stand-in) with part 2's GPU items reported
as "not gradable without a GPU" (left out of the total) where there is none;
`--skeleton` gives 0 / 110 fast. A reduce-scatter
that divides every contribution by P before adding (the classic averaging
mistake) loses the reduce-scatter and allreduce items, the hidden item that
checks the three rings on their own, and the allreduce speed item, and nothing
else."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

from dtlgrade.runner import gpu_available  # noqa: E402

HAVE_GPU = gpu_available()


def gpu_item(test: dict) -> bool:
    """Part 2's items graded on a GPU (all but G2, which its CPU stand-in grades)."""
    return test["name"].startswith("Part 2 ") and not test["name"].startswith("Part 2 G2.")


def gradable(tests: list[dict]) -> list[dict]:
    """The items this machine grades: without a GPU, part 2's GPU items are reported, not scored."""
    return [t for t in tests if HAVE_GPU or not gpu_item(t)]

# The reference's reduce-scatter with the average taken term by term, first.
DIVIDE_FIRST = helpers.mutated_body(
    "reduce_scatter_ring", "03",
    ("    for (T& x : chunk_span(buf, size, rank)) x /= static_cast<T>(size);\n", ""),
    ("  std::vector<T> scratch(chunk_count(buf.size(), size, 0));\n",
     "  std::vector<T> scratch(chunk_count(buf.size(), size, 0));\n"
     "  if (op == ReduceOp::kAvg) {\n"
     "    for (T& x : buf) x /= static_cast<T>(size);\n"
     "  }\n"))


class TestLab03Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, a speed item at full marks
    or left out with its reason, never lower (issue 31). Grading it here under the
    load, rather than twice, keeps the suite's time."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="03", env=helpers.UNDER_LOAD)
        helpers.report_load("lab 03 reference", cls.graded.json["tests"] if cls.graded.json else [])

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks_for_what_this_machine_can_grade(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], (140 if HAVE_GPU else 110) - self.graded.speed_out())
        # 5 part-1 items + 4 part-2 items (3 on a GPU, G2 on CPUs) + 2 speed items + 2 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 13)
        self.assertFullMarks(gradable(self.graded.json["tests"]))

    def test_gpu_items_are_not_gradable_without_a_gpu(self):
        if HAVE_GPU:
            self.skipTest("a GPU is present: part 2 is graded")
        gpu_items = self.graded.items("lab03_gpu")
        self.assertEqual(len(gpu_items), 3)
        for item in gpu_items:
            self.assertEqual(item["max_score"], 0, item["name"])
            self.assertIn("not gradable without a GPU", item["output"], item["name"])


class TestLab03Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="03")

    def test_zero_fast(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertEqual(self.graded.json["max_score"], (140 if HAVE_GPU else 110) - self.graded.speed_out())
        self.assertLess(self.graded.grading_seconds, 120, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)
        for t in self.graded.json["tests"]:
            if t["name"].startswith("Speed:"):
                if not helpers.speed_left_out(t):
                    self.assertIn("speed counts only for a correct solution", t["output"], t["name"])
            elif not gpu_item(t):
                self.assertIn("is not implemented yet", t["output"], t["name"])


class TestLab03DivideFirst(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "reduce_scatter_ring", DIVIDE_FIRST, lab="03")
        cls.graded = helpers.grade("--submission", str(sub), lab="03")

    def test_only_the_average_items_fail(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        perf = [t for t in self.graded.items("perf") if "allreduce_ring of" in t["name"]]
        hidden = [t for t in self.graded.json["tests"] if t["name"].startswith("Hidden: reduce-scatter")]
        failing = self.graded.items("lab03_reduce_scatter") + self.graded.items("lab03_allreduce") + hidden + perf
        self.assertEqual(len(failing), 4, [t["name"] for t in failing])
        self.assertZero(failing)
        rest = [t for t in gradable(self.graded.json["tests"]) if t not in failing]
        self.assertFullMarks(rest)
        self.assertEqual(self.graded.json["score"], (64 if not HAVE_GPU else 94) - self.graded.speed_out())

    def test_message_shows_rank_and_element(self):
        item = self.graded.item("B. ring allreduce: sum and average (divided once), 2(P-1) messages")
        self.assertRegex(item["output"], r"rank \d+")
        self.assertRegex(item["output"], r"expected .* got ")


if __name__ == "__main__":
    unittest.main()
