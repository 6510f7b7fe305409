"""Lab 02 forbids the vendor's collectives: a broadcast_binomial that calls
MPI_Bcast would give the right result, yet it never runs: the imports check
(grader/dtlgrade/imports.py, the rubric's [[imports.refuse]]) refuses broadcast.cc
before anything runs, names MPI_Bcast and the file, and grades the file as the
skeleton's. Every item that needs it scores 0 -- the two broadcast items
(broadcast() takes the tree below its switch size), the hidden broadcast item and
the speed item, which counts only for a correct broadcast -- and says why first.
Every other collective keeps its points, and the grader exits 0. (The tests'
tracer would also catch the call at run time, naming it: test_hidden_catch and
the public tests keep that path covered.)"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# Correct result, wrong means: the vendor's broadcast inside the student's.
VENDOR_BROADCAST = """\
  DTL_MPI_CHECK(MPI_Bcast(buf.data(), count, type, root, comm));
"""


class TestLab02VendorCall(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "broadcast_binomial", VENDOR_BROADCAST,
                                      lab="02")
        cls.graded = helpers.grade("--submission", str(sub), lab="02")

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertNotIn("Traceback", self.graded.output)

    def test_broadcast_items_zero_others_full(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())
        self.assertEqual(len(self.graded.items("lab02_broadcast")), 2)
        self.assertEqual(len(self.graded.items("lab02_hidden_broadcast")), 1)
        self.assertOnlyGroupsFail(self.graded, ("lab02_broadcast", "lab02_hidden_broadcast", "perf"))
        self.assertEqual(self.graded.json["score"], 60)

    def test_message_names_the_vendor_call(self):
        self.assertIn("refused: labs/02_collectives/src/broadcast.cc uses MPI_Bcast: a vendor collective",
                      self.graded.output)
        tree = self.graded.item("A. broadcast: binomial tree")
        self.assertIn("broadcast_binomial", tree["output"])
        for t in self.graded.items("lab02_broadcast") + self.graded.items("lab02_hidden_broadcast"):
            self.assertIn("uses MPI_Bcast", t["output"], t["name"])
        (speed,) = self.graded.items("perf")
        if not helpers.speed_left_out(speed):  # a grader with fewer cores than the item's 3 ranks
            self.assertIn("speed counts only for a correct solution", speed["output"])


if __name__ == "__main__":
    unittest.main()
