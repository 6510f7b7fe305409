"""A submission that #includes the reference's solution instead of writing its
own — through the pristine tree's include root or by an absolute path into this
repository — scores 0, and the output names the files it was not allowed to use
(the compiler's dependency lists are checked, not the #include text)."""
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
            self.assertIn("includes files it may not use", t["output"], t["name"])
            self.assertIn(str(helpers.REFERENCE_SRC / "halo.cc"), t["output"], t["name"])
            self.assertRegex(t["output"], r"tree/reference/01_point_to_point/src/ring\.cc", t["name"])


if __name__ == "__main__":
    unittest.main()
