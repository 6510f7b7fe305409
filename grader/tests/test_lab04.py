"""Lab 04 end to end: `grade.py 04 --reference` gives 120 / 120 (100 public, 10
for speed, 10 example hidden; 130 / 130 with the GPU item where there is a GPU,
which elsewhere is reported as not gradable), with lab 03's reference ring as the ring backend;
`--skeleton` gives 0 fast, every item saying what is not implemented yet. A
correct reducer that sends nothing before backward is over (every bucket held
back until the step's last gradient, then all issued from that hook) passes the
timing overlap tests, fails the one that watches where each bucket leaves (the
gradients of later buckets were ready at its issue), and loses the speed item, by
the ratio it measures (issue 26); one that polls each bucket's test() until it
finishes, inside the hook that issued it, fails the overlap item too. A submission whose
lab 03 file (compiled into lab 04's build) includes the reference's lab 03 header
is refused like one whose lab 04 file does: every submitted file a build
compiles is checked, not only the graded lab's."""
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402
from dtlgrade.runner import gpu_available  # noqa: E402

HAVE_GPU = gpu_available()


# The reference's hook with the launch held back until every bucket is complete:
# the buckets still leave in bucket order, from a gradient hook, before backward
# returns (so the timing Overlap tests pass: bucket 0 is issued before unit 0's
# backward ends and is in flight when it does), but nothing overlaps backward.
HELD_BACK = helpers.mutated_body(
    "Reducer::on_grad_ready", "04",
    ("  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped) {\n",
     "  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped &&\n"
     "      std::count(pending_.begin(), pending_.end(), std::size_t{0}) ==\n"
     "          static_cast<std::ptrdiff_t>(pending_.size())) {\n"))

# The reference's launch, then a loop on the bucket's test() until it finishes: a wait.
SPINS = helpers.mutated_body(
    "Reducer::launch", "04",
    ("  work_[bucket] = backend_.allreduce(flat_grad_ + bk.offset, bk.count, DType::kF32, ReduceOp::kAvg);\n",
     "  work_[bucket] = backend_.allreduce(flat_grad_ + bk.offset, bk.count, DType::kF32, ReduceOp::kAvg);\n"
     "  while (!work_[bucket].test()) {\n  }  // fault: a spin is a wait\n"))

TIMED = "--gtest_filter=Overlap.OverlappedIssuesDuringBackwardOthersAfter:Overlap.BackwardRunsWhileABucketIsInFlight"
WATCHED = "--gtest_filter=Overlap.EachBucketLeavesFromItsHookAndBackwardGoesOn"

SPEED = "Speed: the overlapped DDP step on an emulated link, against the reference"


class TestLab04Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        helpers.grade_kept(cls, "04", under_load=True)

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 130 if HAVE_GPU else 120)

    def test_the_gpu_item_is_not_gradable_without_a_gpu(self):
        if HAVE_GPU:
            self.skipTest("a GPU is present: the GPU item is graded")
        gpu_items = self.graded.items("lab04_gpu")
        self.assertEqual(len(gpu_items), 1)
        self.assertEqual(gpu_items[0]["max_score"], 0)
        self.assertIn("not gradable without a GPU", gpu_items[0]["output"])

    def test_a_reducer_that_holds_its_buckets_back_loses_the_overlap_and_speed_items(self):
        # In the kept tree (graded as the reference): the fault rebuilt into the
        # student test program and benchmark only: 29 s in all on the shared 2-core
        # machine (ratio 1.54 and 1.61 in two runs), where grading it again took 211 s.
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        helpers.mutate_kept(self.work, "04", "Reducer::on_grad_ready", HELD_BACK)
        try:
            build = helpers.rebuild_kept(self.work, "04", "lab04_student_test", "lab04_student_bench")
            self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
            # The timing tests cannot see it (bucket 0 leaves during backward and is in
            # flight when a unit's backward ends), nor can the equivalence; BucketWatch
            # can (Note [Watching the buckets leave]).
            for ranks in (2, 3):
                rc, out, _ = helpers.run_kept_tests(self.work, "04", ranks, TIMED + ":Emulated/*")
                self.assertEqual(rc, 0, out[-3000:])
                rc, out, _ = helpers.run_kept_tests(self.work, "04", ranks, WATCHED)
                self.assertNotEqual(rc, 0, out[-3000:])
                self.assertIn("rank 0, bucket 0", out, out[-3000:])
                self.assertIn("gradients of later buckets were ready", out, out[-3000:])
            speed = helpers.kept_speed(self.work, "04", SPEED)
            print(f"\n[fault, lab 04] {speed.output.splitlines()[0]}", file=sys.stderr)  # the numbers behind it
            self.assertEqual(speed.status, "failed", speed.output)
            self.assertEqual(speed.score, 0, speed.output)
            self.assertGreaterEqual(speed.details["ratio"], 1.4, speed.output)
            # A loop on test() right after the issue: a wait in the hook (Note [A spin is a wait]).
            helpers.mutate_kept(self.work, "04", "Reducer::on_grad_ready",
                                helpers.reference_body("Reducer::on_grad_ready", "04"))
            helpers.mutate_kept(self.work, "04", "Reducer::launch", SPINS)
            build = helpers.rebuild_kept(self.work, "04", "lab04_student_test")
            self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
            rc, out, _ = helpers.run_kept_tests(self.work, "04", 2, WATCHED)
            self.assertNotEqual(rc, 0, out[-3000:])
            self.assertIn("its allreduce was waited for (or its test() polled until it finished) before backward",
                          out, out[-3000:])
        finally:  # the sources back to the reference's
            for function in ("Reducer::on_grad_ready", "Reducer::launch"):
                helpers.mutate_kept(self.work, "04", function, helpers.reference_body(function, "04"))


class TestLab04Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="04")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


class TestLab04ForeignIncludeInLab03(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.temp_folder(cls) / "sub"
        shutil.copytree(helpers.ROOT / "labs" / "04_bucketed_ddp" / "src", sub / "labs" / "04_bucketed_ddp" / "src")
        dep = sub / "labs" / "03_ring_allreduce" / "src"
        shutil.copytree(helpers.ROOT / "labs" / "03_ring_allreduce" / "src", dep)
        ring = dep / "ring_allreduce.cc"
        ring.write_text('#include "../../../reference/03_ring_allreduce/src/virtual_ring.h"\n' + ring.read_text())
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden", lab="04")

    def test_refused_and_named(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertIn("the submission includes files it may not use", self.graded.output)
        self.assertIn("reference/03_ring_allreduce/src/virtual_ring.h", self.graded.output)


if __name__ == "__main__":
    unittest.main()
