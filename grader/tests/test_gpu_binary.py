"""GPU test binaries in rubrics: `binary = "gpu"` names labNN_student_gpu (the
tests/*_gpu_test.cc of dtl_add_lab), implies `gpu = true`, is built only where a
GPU can run it, and an unknown binary is a rubric error. Unit tests of dtlgrade's
parse_items() and binaries_for(): no build, no MPI."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402,F401  (puts grader/ on the path for dtlgrade)
from dtlgrade.lab import GraderError, Lab, binaries_for, parse_items  # noqa: E402
from dtlgrade import report, score  # noqa: E402

RUBRIC = {"item": [
    {"name": "CPU item", "points": 5, "tests": ["A.B"], "ranks": [1, 2]},
    {"name": "GPU item", "points": 10, "tests": ["G.*"], "ranks": [1, 2], "binary": "gpu"},
]}


def lab_with(items):
    return Lab(number="03", name="03_ring_allreduce", title="t", items=items, needs_cuda=True)


class TestGpuBinary(unittest.TestCase):
    def test_gpu_binary_implies_gpu_item(self):
        items = parse_items(RUBRIC, 10.0, "test", "rubric")
        self.assertEqual([i.binary for i in items], ["test", "gpu"])
        self.assertEqual([i.gpu for i in items], [False, True])

    def test_unknown_binary_is_a_rubric_error(self):
        bad = {"item": [{"name": "x", "points": 1, "tests": ["A.B"], "ranks": [1], "binary": "gpus"}]}
        with self.assertRaises(GraderError) as ctx:
            parse_items(bad, 10.0, "test", "rubric.toml")
        self.assertIn("gpus", str(ctx.exception))
        self.assertIn("rubric.toml", str(ctx.exception))

    def test_gpu_binary_built_only_with_a_gpu(self):
        lab = lab_with(parse_items(RUBRIC, 10.0, "test", "rubric"))
        self.assertEqual(binaries_for(lab, has_hidden=False, gpu=True),
                         {"test": "lab03_student_test", "gpu": "lab03_student_gpu"})
        self.assertEqual(binaries_for(lab, has_hidden=True, gpu=False),
                         {"test": "lab03_student_test", "hidden": "lab03_student_hidden"})

    def test_no_gpu_binary_without_gpu_items(self):
        lab = lab_with(parse_items({"item": RUBRIC["item"][:1]}, 10.0, "test", "rubric"))
        self.assertEqual(binaries_for(lab, has_hidden=False, gpu=True), {"test": "lab03_student_test"})

    def test_not_gradable_row_leaves_the_total(self):
        item = parse_items(RUBRIC, 10.0, "test", "rubric")[1]
        row = score.not_gradable_row(item)
        self.assertEqual((row["score"], row["max_score"]), (0.0, 0.0))
        self.assertEqual(row["status"], "not gradable without a GPU")
        self.assertNotIn("status", report.test_entry(row))


if __name__ == "__main__":
    unittest.main()
