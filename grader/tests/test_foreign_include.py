"""A submission that #includes the reference's solution instead of writing its
own scores 0, and the output names the file. Through the pristine tree's include
root, the build finds it and the include check refuses it (the compiler's
dependency lists are checked, not the #include text); by an absolute path into
this repository, the build's sandbox cannot see the file at all."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestForeignInclude(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub")
        (sub / "ring.cc").write_text('#include "reference/01_point_to_point/src/ring.cc"\n')
        (sub / "halo.cc").write_text(f'#include "{helpers.REFERENCE_SRC / "halo.cc"}"\n')
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_scores_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)

    def test_names_the_files(self):
        for t in self.graded.json["tests"]:
            self.assertIn(str(helpers.REFERENCE_SRC / "halo.cc"), t["output"], t["name"])
            if helpers.sandbox_works():  # the grader's checkout is out of the build's sight
                self.assertIn("does not compile", t["output"], t["name"])
                self.assertIn("No such file", t["output"], t["name"])
            else:
                self.assertIn("includes files it may not use", t["output"], t["name"])


class TestForeignIncludeInTree(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub")
        (sub / "ring.cc").write_text('#include "reference/01_point_to_point/src/ring.cc"\n')
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_include_check_names_the_file(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertEqual(self.graded.json["score"], 0)
        for t in self.graded.json["tests"]:
            self.assertIn("includes files it may not use", t["output"], t["name"])
            self.assertRegex(t["output"], r"tree/reference/01_point_to_point/src/ring\.cc", t["name"])


if __name__ == "__main__":
    unittest.main()
