"""Where the graded files come from. A checkout of the repository is graded from
labs/01_point_to_point/src only (not from a top-level src/), files other than the
lab's src/*.cc are ignored and listed, and a submission that ships its own,
doctored tests cannot change the results: the tests always come from the grader's
repository."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# Same test names as labs/01_point_to_point/tests/ring_test.cc, all trivially passing.
DOCTORED_RING_TEST = """\
#include <gtest/gtest.h>
TEST(Ring, ShiftsSmallMessages) {}
TEST(Ring, ShiftsLargeMessagesWithoutDeadlock) {}
TEST(Ring, FullCircleReturnsOwnData) {}
TEST(Ring, KeepsTagsAndSourcesApart) {}
TEST(Ring, RejectsBadArguments) {}
"""
NEVER_COMPILED = '#error "this file must never be compiled by the grader"\n'


def make_checkout(root: Path, source: Path) -> Path:
    """A repository checkout: labs/01_point_to_point/src from `source`, a doctored
    tests/ring_test.cc beside it, and junk that must not be built or graded."""
    lab = root / "labs" / helpers.LAB_NAME
    src = helpers.make_submission(lab / "src", source=source)
    (src / "evil.cc").write_text(NEVER_COMPILED)
    (lab / "tests").mkdir()
    (lab / "tests" / "ring_test.cc").write_text(DOCTORED_RING_TEST)
    top = root / "src"  # a top-level src/ the grader must not prefer to the lab's
    top.mkdir()
    (top / "ring.cc").write_text(NEVER_COMPILED)
    (top / "evil.cc").write_text(NEVER_COMPILED)
    return root


class TestCheckoutOfReference(helpers.GraderAssertions, unittest.TestCase):
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        cls.checkout = make_checkout(helpers.temp_folder(cls) / "checkout", helpers.REFERENCE_SRC)
        cls.graded = helpers.grade("--submission", str(cls.checkout))

    def test_graded_from_the_labs_src_folder(self):
        self.assertIn(f"submission {self.checkout / 'labs' / helpers.LAB_NAME / 'src'}", self.graded.output)
        self.assertNotIn("does not compile", self.graded.output)

    def test_full_marks(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 100 - self.graded.speed_out())
        self.assertEqual(self.graded.json["max_score"], 100 - self.graded.speed_out())
        self.assertFullMarks(self.graded.json["tests"])

    def test_ignored_files_noted(self):
        self.assertIn("note: ignored (only alpha_beta.cc, halo.cc, ping_pong.cc, ring.cc are graded): evil.cc",
                      self.graded.output)
        self.assertIn("evil.cc", self.graded.json["output"])


class TestDoctoredTestsDoNotCount(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        checkout = make_checkout(helpers.temp_folder(cls) / "checkout", helpers.SKELETON_SRC)
        cls.graded = helpers.grade("--submission", str(checkout), "--no-hidden")

    def test_ring_items_still_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertZero(self.graded.items("ring_shift"))
        for t in self.graded.items("ring_shift"):
            self.assertIn("ring_shift is not implemented yet", t["output"], t["name"])

    def test_whole_score_zero(self):
        self.assertEqual(self.graded.json["score"], 0)
        self.assertEqual(self.graded.json["max_score"], 90)


if __name__ == "__main__":
    unittest.main()
