"""Lab 04 end to end: `grade.py 04 --reference` gives 120 / 120 (100 public, 10
for speed, 10 example hidden), with lab 03's reference ring as the ring backend;
`--skeleton` gives 0 fast, every item saying what is not implemented yet. A
correct reducer that sends nothing before backward is over (every bucket held
back until the step's last gradient, then all issued from that hook) keeps every
correctness point, the overlap item's included, and loses the speed item, by
the ratio it measures (issue 26). A submission whose
lab 03 file (compiled into lab 04's build) includes the reference's lab 03 header
is refused like one whose lab 04 file does: every submitted file a build
compiles is checked, not only the graded lab's."""
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestLab04Reference(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="04")

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 120)


class TestLab04Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="04")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


# The reference's hook with the launch held back until every bucket is complete:
# the buckets still leave in bucket order, from a gradient hook, before backward
# returns (so the Overlap tests pass: bucket 0 is issued before unit 0's backward
# ends and is in flight when it does), but nothing overlaps backward.
HELD_BACK = helpers.mutated_body(
    "Reducer::on_grad_ready", "04",
    ("  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped) {\n",
     "  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped &&\n"
     "      std::count(pending_.begin(), pending_.end(), std::size_t{0}) ==\n"
     "          static_cast<std::ptrdiff_t>(pending_.size())) {\n"))

SPEED = "Speed: the overlapped DDP step on an emulated link, against the reference"


class TestLab04NoOverlap(helpers.GraderAssertions, unittest.TestCase):
    """One grading (no hidden tests): about 110 s on 2 idle cores, of which the
    speed item takes about 15 s."""

    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "Reducer::on_grad_ready", HELD_BACK, lab="04")
        helpers.make_submission(sub, lab="03")  # lab 03's reference beside it: the ring item passes too
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden", lab="04")

    def test_only_the_speed_item_is_lost(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        speed = self.graded.item(SPEED)
        self.assertFalse(helpers.speed_left_out(speed), speed["output"])
        self.assertEqual(speed["score"], 0, speed["output"])
        self.assertFullMarks([t for t in self.graded.json["tests"] if t is not speed])
        self.assertEqual(self.graded.json["score"], 100)

    def test_output_gives_the_ratio(self):
        output = self.graded.item(SPEED)["output"]
        ratio = float(output.split("submission/reference = ")[1].split()[0])
        self.assertGreaterEqual(ratio, 1.4, output)


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
