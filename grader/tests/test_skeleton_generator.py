"""The solution generator, grader/skeleton.py: unit tests of transform() (named
and unnamed blocks, hints, text outside blocks, every malformed-marker error) and
`skeleton.py --check` (exit 0 on this repository, 1 on a stale copy)."""
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

SKELETON_PY = helpers.ROOT / "grader" / "skeleton.py"
_spec = importlib.util.spec_from_file_location("dtl_skeleton", SKELETON_PY)
skeleton = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(skeleton)


class TestTransform(unittest.TestCase):
    def test_named_block_becomes_hint_and_throw(self):
        text = ("int f(int x) {\n"
                "  // BEGIN SOLUTION(f)\n"
                "  // | Return twice x.\n"
                "  // | Use no loop.\n"
                "  return 2 * x;\n"
                "  // END SOLUTION\n"
                "}\n")
        self.assertEqual(skeleton.transform(text),
                         "int f(int x) {\n"
                         "  // TODO(student): Return twice x.\n"
                         "  //   Use no loop.\n"
                         '  throw dtl::NotImplemented("f");\n'
                         "}\n")

    def test_named_block_without_hint(self):
        text = "  // BEGIN SOLUTION(dtl::g)\n  g();\n  // END SOLUTION\n"
        self.assertEqual(skeleton.transform(text),
                         "  // TODO(student): implement this part (see the handout).\n"
                         '  throw dtl::NotImplemented("dtl::g");\n')

    def test_unnamed_block_becomes_only_the_todo(self):
        text = ("// BEGIN SOLUTION\n"
                "// | A helper of your own.\n"
                "static int helper() { return 1; }\n"
                "// END SOLUTION\n")
        out = skeleton.transform(text)
        self.assertEqual(out, "// TODO(student): A helper of your own.\n")
        self.assertNotIn("NotImplemented", out)

    def test_empty_hint_line_kept_as_comment(self):
        text = "// BEGIN SOLUTION(h)\n// | First.\n// |\n// | Third.\nx();\n// END SOLUTION\n"
        self.assertEqual(skeleton.transform(text),
                         '// TODO(student): First.\n//\n//   Third.\nthrow dtl::NotImplemented("h");\n')

    def test_text_outside_blocks_unchanged(self):
        before = "#include <mpi.h>\n\n// a comment about END SOLUTION in prose\nint a = 1;\n"
        after = "\nint z = 3;   \n// last line without newline"
        block = "// BEGIN SOLUTION(k)\nk();\n// END SOLUTION\n"
        out = skeleton.transform(before + block + after)
        self.assertTrue(out.startswith(before), out)
        self.assertTrue(out.endswith(after), out)
        self.assertEqual(skeleton.transform(before + after), before + after)

    def test_reference_files_have_named_blocks(self):
        for lab, (lab_name, function_files) in helpers.LABS.items():
            for function, name in function_files.items():
                out = skeleton.transform((helpers.reference_src(lab) / name).read_text(), name)
                self.assertIn(f'throw dtl::NotImplemented("{function}");', out, f"lab {lab}: {name}")
                self.assertEqual(out, (helpers.ROOT / "labs" / lab_name / "src" / name).read_text())

    def assertMarkerError(self, text: str, pattern: str) -> None:
        with self.assertRaisesRegex(skeleton.MarkerError, pattern):
            skeleton.transform(text, "ref.cc")

    def test_begin_without_end(self):
        self.assertMarkerError("a\n// BEGIN SOLUTION(f)\nx();\n", r"^ref\.cc:2: BEGIN SOLUTION without an END")

    def test_nested_begin(self):
        self.assertMarkerError("// BEGIN SOLUTION(f)\n// BEGIN SOLUTION(g)\n// END SOLUTION\n// END SOLUTION\n",
                               r"^ref\.cc:2: BEGIN SOLUTION inside the block opened at line 1")

    def test_end_without_begin(self):
        self.assertMarkerError("x();\n  // END SOLUTION\n", r"^ref\.cc:2: END SOLUTION without a BEGIN")

    def test_todo_student_in_reference(self):
        self.assertMarkerError("int a;\n// TODO(student): do it\n", r"^ref\.cc:2: TODO\(student\) belongs in labs/")


class TestCheck(unittest.TestCase):
    def check(self, root: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SKELETON_PY), "--check", str(root)], capture_output=True,
                              text=True, timeout=60)

    def test_repository_in_sync(self):
        result = self.check(helpers.ROOT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")

    def test_stale_copy_detected(self):
        with tempfile.TemporaryDirectory(prefix="dtl-skeleton-test-") as tmp:
            root = Path(tmp)
            shutil.copytree(helpers.REFERENCE_SRC, root / "reference" / helpers.LAB_NAME / "src")
            lab_src = root / "labs" / helpers.LAB_NAME / "src"
            shutil.copytree(helpers.SKELETON_SRC, lab_src)
            self.assertEqual(self.check(root).returncode, 0)
            ring = lab_src / "ring.cc"
            ring.write_text(ring.read_text() + "// edited by hand\n")
            (lab_src / "extra.cc").write_text("int x;\n")
            result = self.check(root)
            self.assertEqual(result.returncode, 1)
            self.assertIn(str(ring), result.stderr)
            self.assertIn("extra.cc (no such file in", result.stderr)
            self.assertIn("-// edited by hand", result.stdout)  # the diff

    def test_solution_free_file_refused(self):
        """A reference file with no task belongs in labs/NN/given/: --check names that folder."""
        with tempfile.TemporaryDirectory(prefix="dtl-skeleton-test-") as tmp:
            root = Path(tmp)
            ref = root / "reference" / helpers.LAB_NAME / "src"
            shutil.copytree(helpers.REFERENCE_SRC, ref)
            shutil.copytree(helpers.SKELETON_SRC, root / "labs" / helpers.LAB_NAME / "src")
            (ref / "plain.cc").write_text("int answer() { return 42; }\n")
            result = self.check(root)
            self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
            self.assertIn("plain.cc: no BEGIN SOLUTION block", result.stderr)
            self.assertIn(f"labs/{helpers.LAB_NAME}/given/", result.stderr)

    def test_every_skeleton_file_holds_a_task(self):
        for src in sorted(helpers.ROOT.glob("labs/[0-9][0-9]_*/src")):
            for path in sorted(src.rglob("*")):
                if path.is_file() and path.suffix in skeleton.SOURCE_SUFFIXES:
                    self.assertIn("TODO(student)", path.read_text(), f"{path}: no task (move it to given/)")


if __name__ == "__main__":
    unittest.main()
