"""A submission that does not compile (a syntax error in ring.cc): every item
scores 0 and says so with the compiler's error (file, line, "error:"), and the
grader still exits 0 and writes its JSON: a student's error, never the grader's."""
import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

ERROR_LINE = re.compile(r"ring\.cc:\d+:\d+: error: ")


class TestCompileError(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", "ring_shift",
                                      "  int oops = ;  // a syntax error\n")
        cls.graded = helpers.grade("--submission", str(sub))

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertNotIn("Traceback", self.graded.output)

    def test_every_item_zero(self):
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())
        self.assertEqual(len(self.graded.json["tests"]), 12)  # 9 items, 1 speed item, 2 hidden
        self.assertZero([t for t in self.graded.json["tests"] if not helpers.speed_left_out(t)])

    def test_items_show_the_compiler_error(self):
        for t in self.graded.json["tests"]:
            self.assertTrue(t["output"].startswith("the submission does not compile:"), t["output"][:200])
            self.assertRegex(t["output"], ERROR_LINE)
            self.assertLessEqual(len(t["output"]), 4000)

    def test_printed_output_shows_the_compiler_error(self):
        self.assertIn("the submission does not compile; every item scores 0", self.graded.output)
        self.assertRegex(self.graded.output, ERROR_LINE)

    def test_only_error_lines_not_the_build_log(self):
        # ninja's progress line for harness/error.cc is not a compiler error
        self.assertNotIn("dtl_harness.dir/error.cc.o", self.graded.json["tests"][0]["output"])


if __name__ == "__main__":
    unittest.main()
