"""Lab 05 end to end: `grade.py 05 --reference` gives 158 / 158 without a GPU
(130 public CPU points, 10 for speed and 13 example hidden ones; the two 5-point GPU
items are reported as "not gradable without a GPU" and left out of the total),
163 / 163 with one; `--skeleton` gives 0 fast, every item saying what is not implemented yet;
one fault in one task costs that task's items (and "A+B+C") only; the handout's
points table lists every rubric item (public, GPU and hidden) with its points."""
import re
import shutil
import sys
import tomllib
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

sys.path.insert(0, str(helpers.ROOT / "grader"))
from dtlgrade.runner import gpu_available  # noqa: E402

HAVE_GPU = gpu_available()
LAB_NAME = "05_mixed_precision"
REFERENCE_SRC = helpers.ROOT / "reference" / LAB_NAME / "src"


def gradable(tests: list[dict]) -> list[dict]:
    """The items this machine grades: without a GPU, the GPU item is reported, not scored."""
    return [t for t in tests if HAVE_GPU or "(GPU)" not in t["name"]]


class TestLab05Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--reference", lab="05", env=helpers.UNDER_LOAD)
        helpers.report_load("lab 05 reference", cls.graded.json["tests"] if cls.graded.json else [])

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks_for_what_this_machine_can_grade(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], (168 if HAVE_GPU else 158) - self.graded.speed_out())
        self.assertEqual(self.graded.json["max_score"], (168 if HAVE_GPU else 158) - self.graded.speed_out())
        # 15 CPU items (A1-C4, A+B+C, D1-D5) + 2 GPU items + 1 speed item + 4 example hidden items
        self.assertEqual(len(self.graded.json["tests"]), 22)
        self.assertFullMarks(gradable(self.graded.json["tests"]))


class TestLab05Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="05")

    def test_zero_fast(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        tests = [t for t in gradable(self.graded.json["tests"]) if not helpers.speed_left_out(t)]
        self.assertZero(tests)
        self.assertLess(self.graded.grading_seconds, 90, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", self.graded.output)
        self.assertNotIn("CRASHED", self.graded.output)
        for t in tests:
            if t["name"].startswith("Speed:"):
                self.assertIn("speed counts only for a correct solution", t["output"], t["name"])
                continue
            self.assertIn("is not implemented yet", t["output"], t["name"])


class TestLab05Handout(unittest.TestCase):
    def test_points_table_matches_the_rubrics(self):
        """Every item of grader/rubrics/05.toml and of the example hidden rubric
        appears in the README's points table, by its label (the name up to the
        first '.'), with its points; and nothing else does."""
        items = []
        for path in (helpers.ROOT / "grader" / "rubrics" / "05.toml",
                     helpers.ROOT / "grader" / "hidden" / LAB_NAME / "rubric.toml"):
            data = tomllib.loads(path.read_text())
            items += data["item"] + data.get("perf", [])
        expected = {i["name"].split(".")[0].replace(" (GPU)", ""): i["points"] for i in items}
        readme = (helpers.ROOT / "labs" / LAB_NAME / "README.md").read_text()
        table = readme[readme.index("## Points"):readme.index("## The benchmark")]
        found = {}
        for line in table.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and re.match(r"^\d+$", cells[1]) and cells[0]:
                found[cells[0].split(".")[0].replace(" (GPU)", "")] = int(cells[1])
        self.assertEqual(found, expected)
        total = sum(i["points"] for i in items if not i.get("gpu"))
        self.assertIn(f"**{total}**", table)


def submission_with(dest: Path, file: str, function: str, old: str, new: str) -> Path:
    """The reference's src/ in `dest`, with `old` replaced by `new` inside `function`'s
    solution block in `file` (a fault of one task)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in REFERENCE_SRC.glob("*.cc"):
        shutil.copyfile(path, dest / path.name)
    text = (dest / file).read_text()
    start = text.index(f"// BEGIN SOLUTION({function})")
    end = text.index("// END SOLUTION", start)
    block = text[start:end]
    if old not in block:
        raise ValueError(f"{old!r} is not in {function}'s solution")
    (dest / file).write_text(text[:start] + block.replace(old, new) + text[end:])
    return dest


# A fault of each task, and the items it must fail: its own task's (public and
# hidden) and "A+B+C"; every other item keeps its points.
FAULTS = {
    # Task A: a sum, not an average (allreduce_mean_half() forgets to divide).
    "A": ("half_reduce.cc", "allreduce_mean_half",
          "  if (placement == DividePlacement::kPre) divide_half(dtype, buf, count, world);\n", "",
          ("A2.", "A+B+C.", "Hidden A.")),
    # Task B: the clean-step counter is not reset after an overflow.
    "B": ("loss_scaler.cc", "LossScaler::update", "    clean_steps_ = 0;\n    if (dynamic) scale_ *= options_.backoff_factor;",
          "    if (dynamic) scale_ *= options_.backoff_factor;", ("B2.", "A+B+C.", "Hidden B.")),
    # Task C: the compute copies are not widened from the new working copy after a
    # step, so forward keeps using the first weights.
    "C": ("mixed_trainer.cc", "MixedPrecisionTrainer::step", "      nn::convert(compute_values_, working_);\n", "",
          ("C2.", "C4.", "A+B+C.", "Hidden C.")),
    # Task D: no error feedback (the error is computed but never added back).
    "D": ("powersgd.cc", "PowerSgd::average",
          "    for (std::size_t k = 0; k < error_[i].size(); ++k) mat[k] += error_[i][k];\n", "",
          ("D2.", "Hidden D.")),
}


class TestLab05OneFaultOneTask(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder = helpers.temp_folder(cls)
        cls.runs = {}
        for task, (file, function, old, new, _) in FAULTS.items():
            sub = submission_with(folder / task, file, function, old, new)
            cls.runs[task] = helpers.grade("--submission", str(sub), lab="05")

    def check(self, task: str) -> None:
        run = self.runs[task]
        self.assertEqual(run.returncode, 0, run.output[-3000:])
        self.assertGradescopeJson(run)
        tests = gradable(run.json["tests"])
        failing = FAULTS[task][4]
        must_fail = [t for t in tests if t["name"].startswith(failing)]
        self.assertEqual(len(must_fail), len(failing), [t["name"] for t in tests])
        self.assertZero(must_fail)
        # Every item of another task keeps its points (items of this task not
        # listed above may pass or fail: the fault need not show everywhere).
        # The speed item requires A2: task A's fault costs it too.
        own = (task, f"Hidden {task}.", "A+B+C.") + (("Speed:",) if task == "A" else ())
        self.assertFullMarks([t for t in tests if not t["name"].startswith(own)])

    def test_a_fault_in_task_a_costs_task_a_only(self):
        self.check("A")

    def test_a_fault_in_task_b_costs_task_b_only(self):
        self.check("B")

    def test_a_fault_in_task_c_costs_task_c_only(self):
        self.check("C")

    def test_a_fault_in_task_d_costs_task_d_only(self):
        self.check("D")


if __name__ == "__main__":
    unittest.main()
