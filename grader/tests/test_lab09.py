"""Lab 09 end to end: `grade.py 09 --reference` gives 120 / 120 (100 public points,
10 for speed and 10 example hidden ones, 13 items; the speed item runs at 3 ranks,
so on 2 cores it is left out of the total, "not gradable here"), `--skeleton` gives 0 fast, every item
saying what is not implemented yet; and one fault, cheaply: in the graded tree
that --keep leaves, the server is changed to answer every SSP pull at once
(the staleness bound ignored), only the student's test program is rebuilt, and
SSP's bound test must fail naming the worker, its clock, the slowest clock and
the bound, while the BSP and ASP tests still pass (the fault is in SSP only). A
worker that pushes every pull to the engine and then waits for all of them before
the forward (BSP's result, nothing overlapped) fails the overlap item (Note [The
probe before unit 0]), and an ASP server that keeps each push until the worker's
clock (then applies it, logging the same kApply) fails the ASP item."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# The fault: on_pull answers an SSP pull whatever the clocks say.
CHECK = "  if (VectorClock::may_read(o.consistency, o.staleness, clock, version_)) {\n"
IGNORED = "  if (o.consistency == Consistency::kSsp || VectorClock::may_read(o.consistency, o.staleness, clock, version_)) {\n"

# The fault: every pull waited for before the forward (the reference's step otherwise).
WAITS_FOR_EVERY_PULL = helpers.mutated_body(
    "train_worker", "09",
    ("          model.hooks().pre_forward = [&](int u) {\n",
     "          engine->wait_all(timeout);  // fault: every pull before the forward (nothing overlaps)\n"
     "          model.hooks().pre_forward = [&](int u) {\n"))

# The fault: ASP's pushes kept and applied at the next clock (one kApply each, as on arrival).
HELD = "static std::vector<std::function<void()>> held;  // fault: ASP pushes kept until a clock\n"
APPLY_AT_CLOCK = helpers.mutated_body(
    "ParameterServer::on_push", "09",
    ("    sgd_[static_cast<std::size_t>(key - first_key_)].step(key_values, grad);\n"
     "    events_.push_back({EventKind::kApply, worker, clock_.at(worker), version_, clock_.min(), key, step});\n",
     "    held.push_back([this, key, key_values, grad, worker, step] {\n"
     "      sgd_[static_cast<std::size_t>(key - first_key_)].step(key_values, grad);\n"
     "      events_.push_back({EventKind::kApply, worker, clock_.at(worker), version_, clock_.min(), key, step});\n"
     "    });\n"))
APPLIED_AT_CLOCK = helpers.mutated_body(
    "ParameterServer::on_clock", "09",
    ("  const int now = clock_.tick(worker);\n",
     "  const int now = clock_.tick(worker);\n  for (auto& apply : held) apply();\n  held.clear();\n"))


class TestLab09Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        helpers.grade_kept(cls, "09", under_load=True)

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 120, items=13)  # 10 public + 1 speed + 2 example hidden items

    def run_tests(self, ranks: int, pattern: str):
        rc, out, _ = helpers.run_kept_tests(self.work, "09", ranks, f"--gtest_filter={pattern}", "--dtl_timeout=60")
        return rc, out

    def test_a_worker_that_waits_for_every_pull_fails_the_overlap_item(self):
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        helpers.mutate_kept(self.work, "09", "train_worker", WAITS_FOR_EVERY_PULL)
        try:
            build = helpers.rebuild_kept(self.work, "09", "lab09_student_test")
            self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
            rc, out = self.run_tests(3, "Overlap.*")
            self.assertNotEqual(rc, 0, out[-3000:])
            self.assertIn("when the forward of unit 0 (which has no keys) began, 6 of the 6 keys had been pulled already",
                          out, out[-3000:])
            rc, out = self.run_tests(3, "Bsp.*")
            self.assertEqual(rc, 0, out[-3000:])
        finally:  # the source back to the reference's
            helpers.mutate_kept(self.work, "09", "train_worker", helpers.reference_body("train_worker", "09"))

    def test_asp_applying_its_pushes_at_the_clock_fails_the_asp_item(self):
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        server = self.work / "tree" / "labs" / "09_parameter_server" / "src" / "server.cc"
        original = server.read_text()
        try:
            helpers.mutate_kept(self.work, "09", "ParameterServer::on_push", APPLY_AT_CLOCK)
            helpers.mutate_kept(self.work, "09", "ParameterServer::on_clock", APPLIED_AT_CLOCK)
            text = server.read_text()
            server.write_text(text.replace("namespace dtl::lab09 {\n", "namespace dtl::lab09 {\n" + HELD, 1))
            build = helpers.rebuild_kept(self.work, "09", "lab09_student_test")
            self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
            rc, out = self.run_tests(3, "Asp.*")
            self.assertNotEqual(rc, 0, out[-3000:])
            self.assertIn("was not applied on arrival: the next event is not its kApply", out, out[-3000:])
        finally:  # the source back as graded
            server.write_text(original)

    def test_ssp_ignoring_its_bound_fails_the_ssp_tests_only(self):
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        server = self.work / "tree" / "labs" / "09_parameter_server" / "src" / "server.cc"
        text = server.read_text()
        self.assertIn(CHECK, text)
        server.write_text(text.replace(CHECK, IGNORED))
        build = helpers.rebuild_kept(self.work, "09")
        self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
        # 4 ranks: S = 1 with W = 3 and S = 2 with W = 2 (s = 0 needs two workers to differ from BSP).
        rc, out = self.run_tests(4, "Ssp.*")
        self.assertNotEqual(rc, 0, out[-3000:])
        # The bound test fails whenever the fast workers get more than s ahead of the
        # straggler (25 ms per step), which they do at once; Ssp.ZeroStalenessIsBsp
        # usually fails too, but it needs a pull to beat a push, so it is not required.
        self.assertIn("FAILED  ] Ssp.NoWorkerEverMoreThanSStepsAheadOfTheSlowest", out)
        self.assertRegex(out, r"worker \d at clock \d+ got key \d while the slowest worker's clock was \d+ "
                              r"\(\d+ steps ahead; the bound is [13]\)")
        rc, out = self.run_tests(4, "Bsp.*:Asp.*")
        self.assertEqual(rc, 0, out[-3000:])


class TestLab09Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="09")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


if __name__ == "__main__":
    unittest.main()
