"""Lab 07 end to end: `grade.py 07 --reference` gives 110 / 110 (100 public points
and 10 example hidden ones), `--skeleton` gives 0 fast, every item saying what is
not implemented yet; and a deliberately mis-ordered pipeline schedule
(PipelineDeadlock.DISABLED_MisorderedScheduleIsReported, run from the graded
tree's test binary) is reported by the test main's watchdog as a DEADLOCK naming
each rank's blocked MPI_Wait on its Irecv, within seconds, never a silent hang."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestLab07Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        helpers.grade_kept(cls, "07")

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 110, items=13)  # 11 public items + 2 example hidden ones

    def run_misordered(self, ranks: int):
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        return helpers.run_kept_tests(self.work, "07", ranks, "--gtest_also_run_disabled_tests",
                                      "--gtest_filter=PipelineDeadlock.*", "--dtl_timeout=3", timeout=60)

    def test_misordered_schedule_is_a_reported_deadlock(self):
        # Stage 0 waits in B0 for the gradient of micro-batch 0 (tag 1) from stage 1;
        # stage 1 waits in F1 for the activation of micro-batch 1 (tag 2) from stage 0;
        # at 3 ranks stage 2 waits for F1's activation from stage 1.
        rc, out, seconds = self.run_misordered(2)
        self.assertNotEqual(rc, 0, out[-3000:])
        self.assertLess(seconds, 30, out[-3000:])
        self.assertIn("DEADLOCK in PipelineDeadlock.DISABLED_MisorderedScheduleIsReported", out)
        self.assertRegex(out, r"rank 0: in MPI_Wait\(1 request: Irecv\(source=1, tag=1, ")
        self.assertRegex(out, r"rank 1: in MPI_Wait\(1 request: Irecv\(source=0, tag=2, ")
        rc, out, seconds = self.run_misordered(3)
        self.assertNotEqual(rc, 0, out[-3000:])
        self.assertLess(seconds, 30, out[-3000:])
        self.assertIn("DEADLOCK in PipelineDeadlock", out)
        self.assertRegex(out, r"rank 2: in MPI_Wait\(1 request: Irecv\(source=1, tag=2, ")


class TestLab07Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="07")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


if __name__ == "__main__":
    unittest.main()
