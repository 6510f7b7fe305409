"""A ring that deadlocks (every rank MPI_Send to the right, then MPI_Recv from the
left): the ring items score 0 with a DEADLOCK report naming the MPI call each rank
is blocked in, every other item keeps its points, and the whole grading ends
within DEADLINE seconds (each hang costs one 10 s test timeout, and a test that
hung is not run again at more ranks)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

DEADLINE = 240  # seconds for the grading, the submission's build included (the course objects', built once per course, not)

DEADLOCKING_RING = """\
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  DTL_MPI_CHECK(MPI_Send(send_buf.data(), count, MPI_BYTE, right, tag, comm));
  DTL_MPI_CHECK(MPI_Recv(recv_buf.data(), count, MPI_BYTE, left, tag, comm, MPI_STATUS_IGNORE));
"""


class TestDeadlock(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "ring_shift", DEADLOCKING_RING)
        # --no-hidden: the public ring tests deadlock already; skipping the example
        # hidden tests saves one more timeout of CI time.
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])

    def hanging_items(self):
        """The ring items whose tests go above an eager limit: all but the tags
        item, which uses 1000 B at 2 to 4 ranks, where the naive order completes
        (its tags are right, so it keeps those points)."""
        return [t for t in self.graded.items("ring_shift") if "tags" not in t["name"]]

    def test_ring_items_zero_others_full(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["max_score"], 90)
        self.assertEqual(len(self.graded.items("ring_shift")), 3)
        # Both size items fail: at 1 rank even the 1000 B "small" shift blocks,
        # since a send to self is rendezvous above Open MPI 4.1's btl_self_eager_limit
        # (1024 B with the header) and the receive comes only after it. The speed
        # item needs a correct ring first, so it scores 0 without being timed.
        self.assertZero(self.hanging_items())
        self.assertZero(self.graded.items("perf"))
        for t in self.graded.items("perf"):
            self.assertIn("speed counts only for a correct solution", t["output"])
        others = [t for t in self.graded.json["tests"] if t not in self.hanging_items()
                  and t not in self.graded.items("perf")]
        self.assertFullMarks(others)
        self.assertEqual(self.graded.json["score"], 60)

    def test_report_names_the_blocked_call(self):
        for t in self.hanging_items():
            self.assertIn("DEADLOCK in Ring.", t["output"], t["name"])
            self.assertIn("every rank is blocked in MPI", t["output"], t["name"])
            self.assertIn("MPI_Send(dest=", t["output"], t["name"])
        self.assertIn("DEADLOCK", self.graded.output)
        self.assertRegex(self.graded.output, r"rank 1: in MPI_Send\(dest=0, tag=\d+, ")
        # The third hang (the 1000 B shift at 1 rank) ran with the short follow-up timeout.
        self.assertIn("had deadlocked 2 times already, so its remaining tests got 5 s each",
                      "\n".join(t["output"] for t in self.hanging_items()))

    def test_finishes_within_deadline(self):
        self.assertLess(self.graded.grading_seconds, DEADLINE)


class TestBudget(helpers.GraderAssertions, unittest.TestCase):
    """The same ring with a budget of 15 s for the test runs: the first deadlock
    (10 s) spends most of it, the runs after it are not started ("not run: the
    lab's time budget ... was spent"), and the grading ends soon after."""

    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "ring_shift", DEADLOCKING_RING)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden", "--budget", "15")

    def test_runs_stop_at_the_budget(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        outputs = "\n".join(t["output"] for t in self.graded.json["tests"])
        self.assertIn("not run: the lab's time budget of 15 s for test runs was spent", outputs)
        self.assertIn("DEADLOCK in Ring.", outputs)  # the first hang is still reported as one
        self.assertLess(self.graded.grading_seconds, DEADLINE)


if __name__ == "__main__":
    unittest.main()
