"""Lab 07 end to end: `grade.py 07 --reference` gives 150 / 150 (120 public points,
10 for speed and 20 example hidden ones), `--skeleton` gives 0 fast, every item
saying what is not implemented yet; a GPipe order submitted as 1F1B loses the
activation-memory speed item, by the 4x it measures (issue 26: 1F1B's bubble is
GPipe's, its memory is not: measured in the kept tree, the fault rebuilt into the
student benchmark only); and a deliberately mis-ordered pipeline schedule
(PipelineDeadlock.DISABLED_MisorderedScheduleIsReported, run from the graded
tree's test binary) is reported by the test main's watchdog as a DEADLOCK naming
each rank's blocked MPI_Wait on its Irecv, within seconds, never a silent hang."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402
from dtlgrade.runner import gpu_available  # noqa: E402

HAVE_GPU = gpu_available()


# GPipe's order returned for 1F1B: every forward, then every backward. Correct (item 2,
# the schedules against what they must achieve, fails on the peak in flight; the
# executor's items run the tests' own orders), with GPipe's bubble, which is 1F1B's,
# and m micro-batches of activations held on stage 0 where 1F1B holds fewer.
GPIPE_AS_1F1B = """\
  for (int i = 0; i < micro_batches; ++i) schedule.push_back({Pass::kForward, i});
  for (int i = 0; i < micro_batches; ++i) schedule.push_back({Pass::kBackward, i});
"""

MEMORY = "Speed: your 1F1B's activation memory at P = 2, m = 8 (stage 0's peak), against the reference"


class TestLab07Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        helpers.grade_kept(cls, "07", under_load=True)

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks(self):
        # 13 public items + 1 GPU item + 2 speed + 4 example hidden
        self.assertReferenceFullMarks(self.graded, 160 if HAVE_GPU else 150, items=20)

    def test_gpipe_submitted_as_1f1b_loses_the_memory_item(self):
        # In the kept tree (graded as the reference): 1F1B's schedule replaced by
        # GPipe's order; only the student benchmark is rebuilt (19.5 s in all on the
        # shared 2-core machine, ratio 3.98; grading it again took 413 s), and the
        # memory item is measured as a grading would, beside the reference's build.
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        helpers.mutate_kept(self.work, "07", "one_f_one_b_schedule", GPIPE_AS_1F1B)
        build = helpers.rebuild_kept(self.work, "07", "lab07_student_bench")
        self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
        memory = helpers.kept_speed(self.work, "07", MEMORY)
        print(f"\n[fault, lab 07] {memory.output.splitlines()[0]}", file=sys.stderr)  # the numbers behind it
        self.assertEqual(memory.status, "failed", memory.output)
        self.assertEqual(memory.score, 0, memory.output)
        # m / P = 4: stage 0 holds all 8 micro-batches, not 2.
        self.assertGreaterEqual(memory.details["ratio"], 3.0, memory.output)

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
