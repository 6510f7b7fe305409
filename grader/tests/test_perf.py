"""Speed points ([[perf]] items): a ring_shift that is correct but slow (it
copies the 4 MiB message back and forth 30 times after receiving it) keeps every
correctness point and loses the speed item, whose output shows the measured
ratio against the reference; the reference itself scores the speed item in
full (test_reference.py)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# The reference's ring shift, then 30 pointless copies of the message.
SLOW_RING = helpers.reference_body("ring_shift") + """\
  std::vector<std::byte> scratch(recv_buf.size());
  for (int i = 0; i < 30; ++i) {  // same result, many times the memory traffic
    std::memcpy(scratch.data(), recv_buf.data(), recv_buf.size());
    std::memcpy(recv_buf.data(), scratch.data(), recv_buf.size());
  }
"""


class TestSlowSubmission(helpers.GraderAssertions, unittest.TestCase):
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "ring_shift", SLOW_RING,
                                      includes=("<cstring>", "<vector>"))
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_correctness_points_kept_speed_lost(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertOnlyGroupsFail(self.graded, ("perf",))
        self.assertZero(self.graded.items("perf"))
        self.assertEqual(self.graded.json["score"], 85)

    def test_output_gives_the_ratio(self):
        (speed,) = self.graded.items("perf")
        self.assertRegex(speed["output"], r"RingShift/4 MiB: submission/reference = \d+\.\d\d")
        ratio = float(speed["output"].split("submission/reference = ")[1].split()[0])
        self.assertGreaterEqual(ratio, 3.0, speed["output"])


if __name__ == "__main__":
    unittest.main()
