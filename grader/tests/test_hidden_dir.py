"""`--hidden DIR`: an instructor's extra hidden tests (a *_test.cc and a
rubric.toml) are built beside the example hidden tests; their item appears in the
JSON with its own visibility and points, and max_score grows by those points."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

HIDDEN_TEST = """\
// A tiny hidden test, written like grader/hidden/01_point_to_point/hidden_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "harness/testing/mpi_test.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::pattern_bytes;

TEST(GraderSuiteHidden, RingShiftsSevenBytes) {
  const int rank = comm().rank();
  const int size = comm().size();
  const auto send = pattern_bytes(7, rank);
  std::vector<std::byte> recv(7);
  dtl::lab01::ring_shift(comm(), send, recv, 11);
  EXPECT_TRUE(buffers_equal(pattern_bytes(7, (rank - 1 + size) % size), recv, "recv_buf"));
}

}  // namespace
"""
ITEM = "Grader suite: a tiny hidden ring test"
RUBRIC = f"""\
[[item]]
name = "{ITEM}"
points = 3
binary = "hidden"
tests = ["GraderSuiteHidden.*"]
ranks = [2, 3]
visibility = "hidden"
"""


class TestHiddenDir(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        hidden = helpers.temp_folder(cls) / "hidden"
        hidden.mkdir()
        (hidden / "tiny_test.cc").write_text(HIDDEN_TEST)
        (hidden / "rubric.toml").write_text(RUBRIC)
        cls.graded = helpers.grade("--reference", "--hidden", str(hidden))
        # Without --hidden DIR: the rubric and the example hidden rubric (the lab's
        # items as the grader reads them; test_reference.py grades them).
        from dtlgrade.lab import load_lab  # noqa: PLC0415 -- grader/ is on sys.path (helpers)
        lab = load_lab(helpers.LAB, [helpers.HIDDEN_EXAMPLE])
        cls.baseline_items = len(lab.items) + len(lab.perf)
        cls.baseline_points = sum(i.points for i in lab.items) + sum(p.points for p in lab.perf)

    def test_exit_code_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)

    def test_item_hidden_and_passed(self):
        item = self.graded.item(ITEM)
        self.assertEqual(item["visibility"], "hidden")
        self.assertEqual(item["status"], "passed")
        self.assertEqual(item["score"], 3)
        self.assertEqual(item["max_score"], 3)
        self.assertEqual(item["output"], "passed at 2, 3 rank(s)")

    def test_max_score_grows_by_three(self):
        # (a speed item too noisy to grade here leaves the total, with its reason)
        self.assertEqual(self.baseline_points, 100)
        self.assertEqual(self.graded.json["max_score"], 103 - self.graded.speed_out())
        self.assertEqual(self.graded.json["score"], 103 - self.graded.speed_out())
        self.assertEqual(len(self.graded.json["tests"]), self.baseline_items + 1)

    def test_example_hidden_items_still_there(self):
        names = {t["name"] for t in self.graded.json["tests"]}
        self.assertEqual(len(self.graded.items("hidden_ring_ping_pong")), 1)
        self.assertEqual(len(self.graded.items("hidden_halo")), 1)
        self.assertIn(ITEM, names)


if __name__ == "__main__":
    unittest.main()
