"""A lab that links another lab's library (lab 04's ring backend is the student's
own lab-03 ring, `FLAVORED_LIBS dtl_lab03` in its CMakeLists.txt): the grader finds
the dependency, copies it into the pristine tree, takes its files from the same
submission (or the reference, or the skeleton), and lets the lab include its
headers. Pure Python: nothing is built."""
import argparse
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dtlgrade.lab import ROOT, dependency_labs, load_lab  # noqa: E402
from dtlgrade.submission import (copy_pristine_tree, dependency_sources,  # noqa: E402
                                 install_dependencies, install_submission)

LAB = "04_bucketed_ddp"
DEP = "03_ring_allreduce"


def args(**kw):
    base = dict(reference=False, skeleton=False, submission=None)
    base.update(kw)
    return argparse.Namespace(**base)


class TestLabDependencies(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dtl-deps-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_found_from_cmakelists(self):
        self.assertEqual(dependency_labs(LAB), [DEP])
        self.assertEqual(dependency_labs(DEP), [])
        self.assertEqual(dependency_labs("01_point_to_point"), [])
        lab = load_lab("04", [])
        self.assertEqual([dep.name for dep in lab.dependencies], [DEP])
        self.assertEqual(lab.dependencies[0].number, "03")
        self.assertIn("ring_allreduce.cc", lab.dependencies[0].src_names)
        self.assertEqual([each.name for each in lab.with_dependencies], [LAB, DEP])
        self.assertEqual([dep.name for dep in load_lab("08", []).dependencies], ["07_pipeline"])

    def test_pristine_tree_holds_the_dependency(self):
        lab = load_lab("04", [])
        copy_pristine_tree(lab, self.tmp, [])
        for top in ("labs", "reference"):
            self.assertTrue((self.tmp / top / DEP / "src").is_dir(), top)
            self.assertTrue((self.tmp / top / LAB).is_dir(), top)
        self.assertTrue((self.tmp / "labs" / DEP / "include" / "lab03" / "ring.h").is_file())
        self.assertFalse((self.tmp / "labs" / "01_point_to_point").exists())

    def test_dependency_files_come_from_the_same_place(self):
        lab = load_lab("04", [])
        dep = lab.dependencies[0]
        self.assertEqual(dependency_sources(dep, self.tmp, args(reference=True))[0],
                         ROOT / "reference" / DEP / "src")
        self.assertIsNone(dependency_sources(dep, self.tmp, args(skeleton=True))[0])
        self.assertEqual(dependency_sources(dep, self.tmp, args())[0], ROOT / "labs" / DEP / "src")
        # A checkout: labs/03_ring_allreduce/src of the submission.
        checkout = self.tmp / "checkout"
        (checkout / "labs" / DEP / "src").mkdir(parents=True)
        (checkout / "labs" / DEP / "src" / "ring_allreduce.cc").write_text("// mine\n")
        self.assertEqual(dependency_sources(dep, checkout / "labs" / LAB / "src",
                                                  args(submission=str(checkout)))[0],
                         checkout / "labs" / DEP / "src")
        # A flat upload with lab 03's files beside lab 04's.
        flat = self.tmp / "flat"
        flat.mkdir()
        (flat / "ddp_reducer.cc").write_text("// lab 04\n")
        (flat / "ring_allreduce.cc").write_text("// lab 03\n")
        self.assertEqual(dependency_sources(dep, flat, args(submission=str(flat)))[0], flat)
        # Neither: the skeleton stays, and a note says the ring items will fail.
        bare = self.tmp / "bare"
        bare.mkdir()
        (bare / "ddp_reducer.cc").write_text("// lab 04\n")
        self.assertIsNone(dependency_sources(dep, bare, args(submission=str(bare)))[0])
        tree = self.tmp / "tree"
        tree.mkdir()
        copy_pristine_tree(lab, tree, [])
        notes = install_dependencies(lab, bare, tree, args(submission=str(bare)))
        self.assertTrue(any("NotImplemented" in n for n in notes), notes)
        notes = install_dependencies(lab, flat, tree, args(submission=str(flat)))
        self.assertEqual((tree / "labs" / DEP / "src" / "ring_allreduce.cc").read_text(), "// lab 03\n")
        self.assertTrue(any("ring_schedule.cc" in n for n in notes), notes)  # missing there: skeleton's
        # lab 03's names in a flat upload are not reported as ignored.
        ignored = install_submission(lab, flat, tree / "labs" / LAB / "src",
                                           also_used=set(dep.src_names))
        self.assertFalse(any("ring_allreduce.cc" in n for n in ignored), ignored)


if __name__ == "__main__":
    unittest.main()
