"""`grade.py 01 --skeleton`: the untouched student skeleton scores 0 within 60 s
(no hang, no crash: its stubs throw dtl::NotImplemented), and every item's output
says which function "is not implemented yet"."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# The function each item group's output must name (the hidden ring/ping-pong item
# runs the ring test first, so ring_shift is its first problem).
NAMED_FUNCTION = {
    "ping_pong": "ping_pong",
    "ring_shift": "ring_shift",
    "halo_exchange": "halo_exchange",
    "fit_alpha_beta": "fit_alpha_beta",
    "hidden_ring_ping_pong": "ring_shift",
    "hidden_halo": "halo_exchange",
}


class TestSkeletonGrade(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton")

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])

    def test_score_zero(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertEqual(self.graded.json["max_score"], 100)
        self.assertZero(self.graded.json["tests"])
        self.assertRegex(self.graded.output, r"TOTAL\s+0 / 100")

    def test_fast(self):
        self.assertLess(self.graded.grading_seconds, 60, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)

    def test_outputs_name_the_unimplemented_function(self):
        checked = 0
        for group, function in NAMED_FUNCTION.items():
            for t in self.graded.items(group):
                self.assertIn(f"{function} is not implemented yet", t["output"], t["name"])
                checked += 1
        for t in self.graded.items("perf"):  # speed counts only once the ring is correct
            self.assertIn("speed counts only for a correct solution", t["output"], t["name"])
            checked += 1
        self.assertEqual(checked, len(self.graded.json["tests"]), "an item belongs to no group")


if __name__ == "__main__":
    unittest.main()
