"""Lab 04 end to end: `grade.py 04 --reference` gives 110 / 110 (100 public, 10
example hidden), with lab 03's reference ring as the ring backend; `--skeleton`
gives 0 fast, every item saying what is not implemented yet. A submission whose
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
        self.assertReferenceFullMarks(self.graded, 110)


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
