"""An output flood: halo_exchange that prints in an endless loop. The grader stops
each flooding run after 16 MiB, the halo items score 0 with an OUTPUT FLOOD
message, the other items keep their points, every JSON output stays short, and
the grading ends (well within DEADLINE seconds)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

DEADLINE = 300  # seconds for the grading, the submission's build included (the course objects', built once per course, not)

# Long lines reach the 16 MiB limit sooner than "spam\n" (less CI time), same case.
FLOODING_HALO = """\
  for (;;) std::puts("spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam "
                     "spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam spam");
"""


class TestFlood(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "halo_exchange", FLOODING_HALO,
                                      includes=("<cstdio>",))
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden", timeout=DEADLINE)

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])

    def test_halo_items_zero_others_full(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["max_score"], 90 - self.graded.speed_out())
        self.assertEqual(len(self.graded.items("halo_exchange")), 2)
        self.assertOnlyGroupsFail(self.graded, ("halo_exchange",))
        self.assertEqual(self.graded.json["score"], 75 - self.graded.speed_out())

    def test_message_is_about_output(self):
        for t in self.graded.items("halo_exchange"):
            self.assertRegex(t["output"], r"^OUTPUT FLOOD Halo\.\w+ at \d rank\(s\):", t["name"])
            self.assertIn("printed more than 16 MiB of output; the run was stopped", t["output"], t["name"])

    def test_json_outputs_capped(self):
        for t in self.graded.json["tests"]:
            self.assertLess(len(t["output"]), 5000, t["name"])
        self.assertLess(len(self.graded.json["output"]), 5000)

    def test_printed_output_capped(self):
        # the flood never reaches the grader's own output in bulk
        self.assertLess(len(self.graded.output), 50_000)
        self.assertRegex(self.graded.output, r"TOTAL\s+75 / 90")

    def test_finishes_within_deadline(self):
        self.assertLess(self.graded.grading_seconds, DEADLINE)


if __name__ == "__main__":
    unittest.main()
