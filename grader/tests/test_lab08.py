"""Lab 08 end to end: `grade.py 08 --reference` gives 125 / 125 (100 public points,
10 for speed and 15 example hidden ones) in 15 items, `--skeleton` gives 0 fast, every item saying
what is not implemented yet; and a submission whose column-parallel layer forgets
f's backward allreduce (each rank returns only its own term of dx) loses exactly
the items built on that layer — the column layer itself, the communication count,
the MLP and attention blocks, the GPT, the grid, both hidden items and the speed
item (it counts only once the GPT is right) — and keeps the row-parallel layer, the
vocabulary items, sequence parallelism with its hidden item (its own code path) and
the refusals: 50 / 125."""
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

LAB_DIR = "08_tensor_parallel"
REFERENCE = helpers.ROOT / "reference" / LAB_DIR / "src"

# Items that need the column-parallel backward's allreduce (grader/rubrics/08.toml).
LOSES = ("1. ", "3. ", "4. ", "5. ", "8. ", "10. ", "Hidden: column", "Hidden: a tensor-parallel GPT", "Speed: ")


class TestLab08Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs: test_speed_under_load.Load): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "its reference's speed items are graded under a load of its own"  # grader/tests/run_suite.py

    @classmethod
    def setUpClass(cls):
        from test_speed_under_load import Load, report  # noqa: PLC0415 -- a sibling test module
        with Load() as load:
            cls.graded = helpers.grade("--reference", lab="08")
        cls.load_share = load.cpu_share
        report("lab 08 reference", cls.graded.json["tests"] if cls.graded.json else [], load.cpu_share)

    def test_the_load_was_there(self):
        from test_speed_under_load import MIN_SHARE  # noqa: PLC0415
        self.assertGreater(self.load_share, MIN_SHARE, "the load was not there")

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 125, items=15)  # 11 public + 1 speed + 3 example hidden items


class TestLab08Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="08")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


class TestLab08ForgottenAllreduce(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder = helpers.temp_folder(cls)
        for path in REFERENCE.glob("*.cc"):
            shutil.copyfile(path, folder / path.name)
        # Lab 07's files beside them (a flat upload may hold a dependency lab's): the
        # grid is lab 07's (lab07/grid.h), so its item fails here for the layer only.
        for path in (helpers.ROOT / "reference" / "07_pipeline" / "src").glob("*.cc"):
            shutil.copyfile(path, folder / path.name)
        target = folder / "parallel_linear.cc"
        body = ("    // f's backward forgotten: each rank keeps its own term dy_r W_r.\n"
                "    return local_.backward(dy, grad_ready);\n")
        target.write_text(helpers.replace_solution(target.read_text(), "ColumnParallelLinear::backward", body))
        cls.graded = helpers.grade("--submission", str(folder), lab="08")

    def test_only_the_items_on_the_column_layer_fail(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        tests = self.graded.json["tests"]
        failing = [t for t in tests if t["name"].startswith(LOSES)]
        passing = [t for t in tests if t not in failing]
        self.assertEqual(len(failing), 9, [t["name"] for t in failing])
        self.assertZero(failing)
        self.assertFullMarks(passing)
        self.assertEqual(self.graded.json["score"], 50)
        column = next(t for t in tests if t["name"].startswith("1. "))
        # The failure names the rank, the element, expected against got.
        self.assertRegex(column["output"], r"rank \d+: dx, the sum over every rank's term .*\[\d+\] expected ")


if __name__ == "__main__":
    unittest.main()
