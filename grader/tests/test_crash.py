"""A crash: ping_pong that writes through a null pointer on rank 1 only. The
ping-pong items score 0 with a message that a rank crashed; the grader resumes
after each crash, so every other item keeps its points, and it exits 0."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# The reference's ping-pong, after a write through a null pointer on rank 1.
CRASHING_PING_PONG = """\
  if (rank == 1) {
    volatile int* null = nullptr;
    *null = 42;  // SIGSEGV on rank 1; the other ranks run the reference below
  }
""" + helpers.reference_body("ping_pong")


class TestCrash(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "ping_pong", CRASHING_PING_PONG)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertNotIn("Traceback", self.graded.output)

    def test_ping_pong_items_zero_others_full(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["max_score"], 90 - self.graded.speed_out())
        self.assertEqual(len(self.graded.items("ping_pong")), 2)
        self.assertOnlyGroupsFail(self.graded, ("ping_pong",))
        self.assertEqual(self.graded.json["score"], 65 - self.graded.speed_out())

    def test_message_says_it_crashed(self):
        for t in self.graded.items("ping_pong"):
            self.assertRegex(t["output"], r"CRASHED PingPong\.\w+ at \d rank\(s\)", t["name"])
            self.assertIn("crashed (mpirun exit code", t["output"], t["name"])
            self.assertIn("a rank died", t["output"], t["name"])
            self.assertLessEqual(len(t["output"]), 5000, t["name"])
        self.assertIn("CRASHED PingPong.", self.graded.output)


if __name__ == "__main__":
    unittest.main()
