"""The prebuilt course objects (grader/dtlgrade/prebuilt.py, Note [Prebuilt course objects]).

  - TestCourseKey: the key that names an entry changes with a harness file, a
    hidden test, a test or the skeleton, and not with the student's files.
  - TestOneBuilderAtATime: two processes that need the same new entry at once
    build it once; the other waits, then uses it.
  - TestPrune: a lab keeps its most recently used entries and any used within
    the hour; older ones beyond those, and any unused for a week, are removed.
  - TestChangedHiddenTest, end to end on lab 01 in a cache of its own: two
    gradings at once build one entry; a hidden test changed under the same file
    name makes a new entry and the grade follows the new test; the entry's
    hidden objects carry no debug information (its public test objects do, so
    the check can tell); a file the entry recorded that changed makes the next
    grading rebuild it; the build's sandbox sees the entry's build folder only.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

from dtlgrade import prebuilt  # noqa: E402
from dtlgrade.lab import load_lab  # noqa: E402
from dtlgrade.sandbox import Sandbox  # noqa: E402
from dtlgrade.submission import copy_pristine_tree  # noqa: E402

ARGS = ["-G", "Ninja", "-DDTL_LABS=01"]
TARGETS = ["lab01_student_test", "lab01_student_hidden"]

# A hidden test that needs no student code: it passes, or (FAILING) fails, whatever is graded.
HIDDEN_TEST = """\
#include <gtest/gtest.h>

TEST(PrebuiltSuite, CourseCodeIsCurrent) { EXPECT_EQ(VALUE, 2); }
"""
PASSING = HIDDEN_TEST.replace("VALUE", "1 + 1")
FAILING = HIDDEN_TEST.replace("VALUE", "1 + 2")
ITEM = "Prebuilt suite: the hidden test's current version"
RUBRIC = f"""\
[[item]]
name = "{ITEM}"
points = 2
binary = "hidden"
tests = ["PrebuiltSuite.*"]
ranks = [1]
"""


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir())


class TestCourseKey(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = load_lab("01", [])
        cls.tree = helpers.temp_folder(cls) / "tree"
        cls.tree.mkdir()
        copy_pristine_tree(cls.lab, cls.tree, [helpers.HIDDEN_EXAMPLE])
        cls.key = prebuilt.course_key(cls.lab, cls.tree, ARGS, TARGETS)

    def changed(self, rel: str, text: str = "\n// changed\n") -> str:
        path = self.tree / rel
        before = path.read_bytes()
        try:
            path.write_bytes(before + text.encode())
            return prebuilt.course_key(self.lab, self.tree, ARGS, TARGETS)
        finally:
            path.write_bytes(before)

    def test_same_tree_same_key(self):
        self.assertEqual(prebuilt.course_key(self.lab, self.tree, ARGS, TARGETS), self.key)

    def test_a_harness_file_changes_it(self):
        self.assertNotEqual(self.changed("harness/testing/gtest_mpi_main.cc"), self.key)
        self.assertNotEqual(self.changed("harness/comm/mpi_comm.h"), self.key)

    def test_a_hidden_test_changes_it(self):
        hidden = next((self.tree / "grader" / "hidden" / self.lab.name).glob("*_test.cc"))
        self.assertNotEqual(self.changed(str(hidden.relative_to(self.tree))), self.key)

    def test_a_public_test_and_the_cmake_files_change_it(self):
        test = next((self.tree / "labs" / self.lab.name / "tests").glob("*_test.cc"))
        self.assertNotEqual(self.changed(str(test.relative_to(self.tree))), self.key)
        self.assertNotEqual(self.changed("cmake/DtlAddLab.cmake", "\n# changed\n"), self.key)

    def test_options_and_targets_change_it(self):
        self.assertNotEqual(prebuilt.course_key(self.lab, self.tree, ARGS + ["-DX=1"], TARGETS), self.key)
        self.assertNotEqual(prebuilt.course_key(self.lab, self.tree, ARGS, TARGETS[:1]), self.key)

    def test_the_student_files_do_not(self):
        ring = f"labs/{self.lab.name}/src/ring.cc"
        self.assertEqual(self.changed(ring), self.key)


def _ensure_in_process(cache: str, log: str, out: str) -> None:
    """One grader process wanting the entry: a fake course build that takes a
    second and says that it ran."""
    os.environ["DTL_PREBUILT_DIR"] = cache
    lab = load_lab("01", [])

    def make_tree(dest: Path) -> None:
        (dest / "course.txt").write_text("course")

    def build_course(tree: Path, build_dir: Path, targets: list[str]):
        with open(log, "a") as f:
            f.write(f"built by {os.getpid()}\n")
        time.sleep(1)
        build_dir.mkdir(parents=True)
        (build_dir / "build.ninja").write_text("# empty\n")
        (build_dir / "labs" / lab.name).mkdir(parents=True)
        return subprocess.CompletedProcess([], 0, "", "")

    entry = prebuilt.ensure(lab, "k" * 24, make_tree, lambda tree: "k" * 24, build_course, [], log=lambda _: None)
    Path(out).write_text(str(entry.folder))


class TestPrune(unittest.TestCase):
    def test_old_entries_beyond_the_newest_go(self):
        with tempfile.TemporaryDirectory(prefix="dtl-prebuilt-prune-") as tmp:
            root, now, hour = Path(tmp), time.time(), 3600
            ages = {"01-a": 0.1, "01-b": 2, "01-c": 3, "01-d": 0.5, "01-e": 5, "01-f": 9,  # hours
                    "02-a": 30, "02-b": 8 * 24}
            for name, age in ages.items():
                (root / name).mkdir()
                (root / name / prebuilt.READY).write_text("{}")
                (root / f"{name}.lock").write_text("")
                os.utime(root / name / prebuilt.READY, (now - age * hour, now - age * hour))
            prebuilt._prune(root)
            left = sorted(p.name for p in root.iterdir() if p.is_dir())
            # Lab 01: the three most recent (a, d, b) and nothing else idle over an hour;
            # lab 02: a is among its newest, b is a week old.
            self.assertEqual(left, ["01-a", "01-b", "01-d", "02-a"])
            self.assertEqual(sorted(p.name for p in root.glob("*.lock")), [f"{n}.lock" for n in left])

    def test_entries_used_within_the_hour_stay(self):
        with tempfile.TemporaryDirectory(prefix="dtl-prebuilt-prune-") as tmp:
            root, now = Path(tmp), time.time()
            for i in range(prebuilt.KEEP_PER_LAB + 3):
                (root / f"04-{i}").mkdir()
                (root / f"04-{i}" / prebuilt.READY).write_text("{}")
                os.utime(root / f"04-{i}" / prebuilt.READY, (now - 60 * i, now - 60 * i))
            prebuilt._prune(root)
            self.assertEqual(len(list(root.iterdir())), prebuilt.KEEP_PER_LAB + 3)


class TestOneBuilderAtATime(unittest.TestCase):
    def test_two_processes_build_the_entry_once(self):
        with tempfile.TemporaryDirectory(prefix="dtl-prebuilt-test-") as tmp:
            cache, log = Path(tmp) / "cache", Path(tmp) / "built.log"
            ctx = multiprocessing.get_context("fork")
            procs = [ctx.Process(target=_ensure_in_process, args=(str(cache), str(log), str(Path(tmp) / f"out{i}")))
                     for i in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(60)
                self.assertEqual(p.exitcode, 0)
            self.assertEqual(len(log.read_text().splitlines()), 1, log.read_text())
            folders = {(Path(tmp) / f"out{i}").read_text() for i in range(2)}
            self.assertEqual(len(folders), 1)
            self.assertTrue((Path(folders.pop()) / prebuilt.READY).is_file())


class TestChangedHiddenTest(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = helpers.temp_folder(cls)
        cls.cache = tmp / "cache"
        cls.env = {"DTL_PREBUILT_DIR": str(cls.cache)}
        cls.hidden = tmp / "hidden"
        cls.hidden.mkdir()
        (cls.hidden / "prebuilt_test.cc").write_text(PASSING)
        (cls.hidden / "rubric.toml").write_text(RUBRIC)
        args = ("--skeleton", "--no-hidden", "--hidden", str(cls.hidden))
        # Two gradings at once, with no entry yet: one builds it, the other waits for it.
        with ThreadPoolExecutor(2) as pool:
            cls.first = list(pool.map(lambda _: helpers.grade(*args, env=cls.env), range(2)))
        cls.first_entries = entries(cls.cache)
        (cls.hidden / "prebuilt_test.cc").write_text(FAILING)
        cls.second = helpers.grade(*args, env=cls.env)
        cls.second_entries = entries(cls.cache)
        cls.new_entry = next(iter(set(cls.second_entries) - set(cls.first_entries)), None)
        # A file the new entry recorded changes: the next grading must not use the entry as it is.
        info = json.loads((cls.new_entry / prebuilt.READY).read_text()) if cls.new_entry else {"files": {}}
        recorded = next((Path(f) for f in info["files"] if "lab01_student_test.dir" in f), None)
        if recorded is not None:
            recorded.write_bytes(recorded.read_bytes())  # same bytes, a new time: ready.json no longer matches
        cls.recorded = recorded
        cls.third = helpers.grade(*args, env=cls.env)

    def test_parallel_gradings_built_one_entry(self):
        for run in self.first:
            self.assertEqual(run.returncode, 0, run.output[-3000:])
            self.assertEqual(run.item(ITEM)["status"], "passed", run.item(ITEM)["output"])
        self.assertEqual(len(self.first_entries), 1)
        self.assertEqual(sum("building the course's objects" in run.output for run in self.first), 1,
                         [run.output[:2000] for run in self.first])

    def test_a_changed_hidden_test_makes_a_new_entry_and_is_graded(self):
        self.assertEqual(self.second.returncode, 0, self.second.output[-3000:])
        self.assertIn("building the course's objects", self.second.output)
        self.assertEqual(len(self.second_entries), 2)
        self.assertEqual(self.second.item(ITEM)["status"], "failed", "graded with the old hidden test")
        self.assertEqual(self.second.item(ITEM)["score"], 0)

    def test_hidden_objects_have_no_debug_information(self):
        self.assertIsNotNone(self.new_entry)
        build = prebuilt.Entry(self.new_entry, {}).build / "labs" / "01_point_to_point"
        hidden = list(build.glob("CMakeFiles/lab01_*_hidden.dir/**/*.o"))
        public = list(build.glob("CMakeFiles/lab01_student_test.dir/**/*.o"))
        self.assertTrue(hidden and public, "no objects where the entry keeps them")
        for obj in hidden + [build / "lab01_reference_hidden"]:
            self.assertFalse(prebuilt.has_debug_info(obj), obj)
        self.assertTrue(any(prebuilt.has_debug_info(obj) for obj in public), "the check sees no debug information")

    def test_a_changed_recorded_file_rebuilds_the_entry(self):
        self.assertIsNotNone(self.recorded, "the entry records no public test object")
        self.assertEqual(self.third.returncode, 0, self.third.output[-3000:])
        self.assertIn("building the course's objects", self.third.output)
        self.assertEqual(self.third.item(ITEM)["status"], "failed")

    def test_the_build_sandbox_sees_the_entry_build_folder_only(self):
        entry = prebuilt.Entry(self.second_entries[0], {})
        args = Sandbox(tree=Path("/tmp/work"), read_only=[entry.build]).wrap(["true"], Path("/tmp"))
        self.assertIn(str(entry.build), args)
        self.assertNotIn(str(entry.tree), args)
        self.assertNotIn(str(entry.folder), args)

    def test_the_repository_build_can_seed_the_entry(self):
        # Note [Seeded by the repository's build]: ccache hands the repository's objects
        # to an entry only if the compiler's command lines are the same once each
        # tree's path is cut off (CCACHE_BASEDIR). The public test objects here: the
        # same sources, the same flags, the CUDA choice included.
        repo = helpers.ROOT / "build"
        if not (repo / "build.ninja").is_file():
            self.skipTest("no repository build (./dtl build) to compare with")
        cache = (repo / "CMakeCache.txt").read_text()
        if "DTL_ENABLE_CUDA:BOOL=OFF" in cache:
            self.skipTest("the repository's build was configured without CUDA (a preset other than default)")
        entry = prebuilt.Entry(self.first_entries[0], {})
        lab = entry.build / "labs" / "01_point_to_point"
        objects = sorted(lab.glob("CMakeFiles/lab01_student_test.dir/tests/*.o"))
        self.assertTrue(objects, "the entry has no public test objects")

        def command(build: Path, root: Path, obj: str) -> str:
            out = subprocess.run(["ninja", "-C", str(build), "-t", "commands", obj], capture_output=True,
                                 text=True, timeout=60).stdout.strip().splitlines()
            return out[-1].replace(str(root), "ROOT") if out else ""
        for obj in objects:
            rel = str(obj.relative_to(entry.build))
            ours = command(entry.build, entry.tree, rel)
            self.assertTrue(ours, rel)
            self.assertEqual(ours, command(repo, helpers.ROOT, rel), rel)


if __name__ == "__main__":
    unittest.main()
