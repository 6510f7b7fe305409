"""`./dtl export-student DIR` (grader/export_student.py): the repository students get.
Checked here without building it (its own `./dtl test` and `./dtl grade 01` were run
by hand; grader/README.md, "Classroom"): what it holds and what it must not, the
GitHub Classroom workflow, the first commit, the refusals; and `--fail-under`, the
exit status the workflow's command grader scores."""
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

ROOT = helpers.ROOT
sys.path.insert(0, str(ROOT / "grader"))
import export_student  # noqa: E402


class TestExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.dest = Path(cls.tmp.name) / "student"
        run = subprocess.run([str(ROOT / "dtl"), "export-student", str(cls.dest)], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        cls.labs = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_dir() and p.name[:2].isdigit())

    def test_no_solutions_no_hidden_tests_no_instructor_tools(self):
        for gone in ("reference", "grader/hidden", "grader/tests", "grader/gradescope", "grader/skeleton.py", ".ci"):
            self.assertFalse((self.dest / gone).exists(), f"{gone} was exported")
        self.assertEqual(export_student.check_export(self.dest), [])

    def test_what_students_need_is_there(self):
        for lab in self.labs:
            src = self.dest / "labs" / lab / "src"
            self.assertTrue(src.is_dir(), lab)
            for f in src.iterdir():
                self.assertEqual(f.read_text(), (ROOT / "labs" / lab / "src" / f.name).read_text(), f)
                self.assertIn("TODO(student)", f.read_text(), f)
            self.assertTrue((self.dest / "labs" / lab / "README.md").is_file(), lab)
            self.assertTrue(any((self.dest / "labs" / lab / "tests").glob("*_test.cc")), lab)
            self.assertTrue((self.dest / "grader" / "rubrics" / f"{lab[:2]}.toml").is_file(), lab)
        for kept in ("dtl", "harness", "datasets", "cmake", "grader/grade.py", "grader/dtlgrade", "CMakeLists.txt"):
            self.assertTrue((self.dest / kept).exists(), kept)
        self.assertTrue((self.dest / "dtl").stat().st_mode & 0o111, "dtl lost its executable bit")
        doxy_input = re.search(r"(?m)^INPUT\s*=(.*)$", (self.dest / "Doxyfile").read_text()).group(1).split()
        self.assertNotIn("reference", doxy_input)
        self.assertIn("harness", doxy_input)

    def test_classroom_workflow_grades_every_lab(self):
        wf = (self.dest / ".github" / "workflows" / "classroom.yml").read_text()
        numbers = [lab[:2] for lab in self.labs]
        steps = re.findall(r"(?m)^\s+id: (lab\d\d)\n\s+uses: classroom-resources/autograding-command-grader@v1", wf)
        self.assertEqual(steps, [f"lab{n}" for n in numbers])
        for n in numbers:
            self.assertIn(f"command: ./dtl grade {n} --no-sandbox --json results-{n}.json --fail-under 100", wf)
            self.assertIn(f'LAB{n}_RESULTS: "${{{{steps.lab{n}.outputs.result}}}}"', wf)
        self.assertRegex(wf, r"uses: classroom-resources/autograding-grading-reporter@v1")
        self.assertIn("runners: " + ",".join(f"lab{n}" for n in numbers), wf)
        self.assertNotIn("\t", wf)  # YAML: spaces only

    def test_one_commit_and_a_clean_tree(self):
        log = subprocess.run(["git", "-C", str(self.dest), "log", "--oneline"], capture_output=True, text=True)
        self.assertEqual(len(log.stdout.strip().splitlines()), 1, log.stdout)
        status = subprocess.run(["git", "-C", str(self.dest), "status", "--porcelain"], capture_output=True, text=True)
        self.assertEqual(status.stdout, "")

    def test_instructor_commands_refuse_in_a_student_tree(self):
        gen = subprocess.run([str(self.dest / "dtl"), "generate", "--check"], capture_output=True, text=True)
        self.assertNotEqual(gen.returncode, 0)
        self.assertIn("this is a student repository", gen.stderr)
        again = subprocess.run([str(self.dest / "dtl"), "export-student", str(self.dest / "x")], capture_output=True,
                               text=True)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("already a student repository", again.stderr)

    def test_a_solution_that_slips_in_is_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "labs").mkdir()
            (d / "labs" / "x.cc").write_text("// BEGIN SOLUTION(f)\nint f() { return 1; }\n// END SOLUTION\n")
            (d / "reference").mkdir()
            problems = export_student.check_export(d)
        self.assertTrue(any("reference/" in p for p in problems), problems)
        self.assertTrue(any("labs/x.cc holds a solution block" in p for p in problems), problems)

    def test_student_facing_text_names_only_what_students_have(self):
        # Every README, handout and deck, and ./dtl help: no reference/, no generator.
        for path in export_student.student_facing(self.dest):
            text = path.read_text()
            for word in export_student.NOT_FOR_STUDENTS:
                self.assertNotIn(word, text, path)
            self.assertNotIn("instructors only", text, path)
        shown = subprocess.run([str(self.dest / "dtl"), "help"], capture_output=True, text=True).stdout
        self.assertIn("build [NN ...]", shown)
        for word in ("generate", "export-student", "reference/"):
            self.assertNotIn(word, shown)
        # The decks' links to the solutions now point at the student's own files, which exist.
        for deck in (self.dest / "slides").glob("[0-9][0-9]_*/slides.md"):
            for target in re.findall(r"\]\((\.\./\.\./labs/[^)#]+)\)", deck.read_text()):
                self.assertTrue((deck.parent / target).exists(), f"{deck.name}: {target}")

    def test_hidden_test_names_stay_hidden(self):
        suites = export_student.hidden_suites(ROOT)
        self.assertIn("HiddenHalf", suites)  # the set is read, not empty
        self.assertEqual(export_student.check_export(self.dest, suites), [])
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "labs" / "05_x" / "bench").mkdir(parents=True)
            (d / "labs" / "05_x" / "bench" / "RESULTS.md").write_text("`HiddenHalf.Overflows` shows it.\n")
            problems = export_student.check_export(d, suites)
        self.assertTrue(any("names the hidden test suite HiddenHalf" in p for p in problems), problems)

    def test_rubrics_carry_the_hidden_points(self):
        import tomllib
        for hidden in sorted((ROOT / "grader" / "hidden").glob("[0-9][0-9]_*/rubric.toml")):
            points = sum(i["points"] for i in tomllib.loads(hidden.read_text())["item"])
            rubric = tomllib.loads((self.dest / "grader" / "rubrics" / f"{hidden.parent.name[:2]}.toml").read_text())
            self.assertEqual(rubric.get("hidden_points"), points, hidden.parent.name)

    def test_a_student_facing_text_that_names_the_solutions_is_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "labs" / "01_x").mkdir(parents=True)
            (d / "labs" / "01_x" / "README.md").write_text("See reference/01_x/src/ for the answer.\n")
            (d / "README.md").write_text("Run ./dtl generate after editing.\n")
            problems = export_student.check_export(d)
        self.assertTrue(any("labs/01_x/README.md names 'reference/'" in p for p in problems), problems)
        self.assertTrue(any("README.md names './dtl generate'" in p for p in problems), problems)

    def test_refuses_a_non_empty_or_inner_folder(self):
        run = subprocess.run([sys.executable, str(ROOT / "grader" / "export_student.py"), str(ROOT / "build" / "x")],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("inside this repository", run.stderr)
        with self.assertRaises(SystemExit):
            export_student.export(self.dest, commit=False)  # exists and is not empty


    # Hints: `./dtl export-student DIR --hints none|some|all` (labs/README.md, "Hints").
    HANDOUT = ("## Task (a)\n\nDo it.\n\n"
               "<!-- hint 1 -->\n<details><summary>Hint 1 (a)</summary>\n\nLook left.\n\n</details>\n<!-- /hint -->\n"
               "<!-- hint 2 -->\n<details><summary>Hint 2 (a)</summary>\n\nA ring.\n\n</details>\n<!-- /hint -->\n"
               "<!-- hint 3 -->\n<details><summary>Hint 3 (a)</summary>\n\nSend right.\n\n</details>\n<!-- /hint -->\n"
               "\n## Task (b)\n\n"
               "<!-- hint 1 -->\n<details><summary>Hint 1 (b)</summary>\n\nCount.\n\n</details>\n<!-- /hint -->\n"
               "\nThe end.\n")

    def test_hints_kept_per_level(self):
        rel = "labs/01_x/README.md"
        kept = {level: export_student.student_text(rel, self.HANDOUT, level) for level in ("none", "some", "all")}
        for level, text in kept.items():
            self.assertIn("Do it.", text)
            self.assertIn("## Task (b)", text)
            self.assertIn("The end.", text)
            self.assertNotIn("<!--", text, level)  # the marker lines never reach students
            self.assertEqual(export_student.hint_problems(text), [])
        self.assertNotIn("<details>", kept["none"])
        self.assertEqual(re.findall(r"<summary>(.*?)</summary>", kept["some"]), ["Hint 1 (a)", "Hint 1 (b)"])
        self.assertEqual(re.findall(r"<summary>(.*?)</summary>", kept["all"]),
                         ["Hint 1 (a)", "Hint 2 (a)", "Hint 3 (a)", "Hint 1 (b)"])
        self.assertIn("Send right.", kept["all"])
        self.assertNotIn("A ring.", kept["some"])

    def test_malformed_hint_markers_are_found(self):
        self.assertEqual(export_student.hint_problems(self.HANDOUT), [])
        unclosed = self.HANDOUT.replace("<!-- /hint -->\n", "", 1)
        self.assertTrue(export_student.hint_problems(unclosed))
        self.assertTrue(any("unmatched" in p for p in export_student.hint_problems("<!-- /hint -->\n")))
        loose = "<!-- hint 1 -->\nno details here\n<!-- /hint -->\n"
        self.assertTrue(any("one <details> element" in p for p in export_student.hint_problems(loose)))
        four = "<!-- hint 4 -->\n<details><summary>Hint 4</summary>x</details>\n<!-- /hint -->\n"
        self.assertTrue(any("numbered 1, 2 and 3" in p for p in export_student.hint_problems(four)))

    def test_every_handout_has_well_formed_graded_hints(self):
        for lab in self.labs:
            text = (ROOT / "labs" / lab / "README.md").read_text()
            self.assertEqual(export_student.hint_problems(text), [], lab)
            levels = re.findall(r"(?m)^<!-- hint (\d) -->$", text)
            for level in "123":
                self.assertIn(level, levels, f"{lab}: no Hint {level}")

    def test_the_default_export_keeps_every_hint(self):
        for lab in self.labs:
            source = (ROOT / "labs" / lab / "README.md").read_text()
            exported = (self.dest / "labs" / lab / "README.md").read_text()
            self.assertEqual(exported.count("<details>"), len(re.findall(r"(?m)^<!-- hint \d -->$", source)), lab)
            self.assertNotIn("<!-- hint", exported, lab)

    def test_export_with_some_or_no_hints(self):
        for level, kept in (("some", {"1"}), ("none", set())):
            with tempfile.TemporaryDirectory() as tmp:
                dest = Path(tmp) / "student"
                run = subprocess.run([str(ROOT / "dtl"), "export-student", str(dest), "--no-commit", "--hints", level],
                                     capture_output=True, text=True, timeout=120)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                for lab in self.labs:
                    text = (dest / "labs" / lab / "README.md").read_text()
                    self.assertEqual(set(re.findall(r"<summary>Hint (\d)", text)), kept, f"{level}: {lab}")
                    self.assertNotIn("<!-- hint", text, lab)
                    # Everything but the hints is still there: the task headings of the full handout.
                    headings = re.findall(r"(?m)^#+ .*$", (self.dest / "labs" / lab / "README.md").read_text())
                    self.assertEqual(re.findall(r"(?m)^#+ .*$", text), headings, f"{level}: {lab}")
                self.assertEqual(export_student.check_export(dest), [])

    def test_a_bad_hints_level_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            dest = Path(tmp) / "student"
            run = subprocess.run([str(ROOT / "dtl"), "export-student", str(dest), "--hints", "most"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
            self.assertIn("--hints most: choose none (no hints), some (Hint 1 of each task) or all", run.stderr)
            self.assertFalse(dest.exists(), "a refused export wrote files")
            with self.assertRaises(SystemExit) as refused:
                export_student.export(dest, commit=False, hints="most")
            self.assertIn("--hints most", str(refused.exception))
            self.assertFalse(dest.exists())
            with self.assertRaises(ValueError):
                export_student.with_hints(self.HANDOUT, "3")


class TestGradingInTheExport(unittest.TestCase):
    """In a student repository labs/NN/src is the student's work: --skeleton must still
    grade the untouched skeleton (kept in grader/skeletons), and plain grading the work."""

    def test_skeleton_and_work_are_told_apart(self):
        with tempfile.TemporaryDirectory(dir=ROOT.parent) as tmp:  # beside the repository: ccache's base_dir
            dest = Path(tmp) / "student"
            export_student.export(dest, commit=False)
            kept = dest / "grader" / "skeletons" / "01_point_to_point" / "src"
            self.assertEqual(sorted(p.name for p in kept.iterdir()),
                             sorted(p.name for p in (ROOT / "labs" / "01_point_to_point" / "src").iterdir()))
            for f in (ROOT / "reference" / "01_point_to_point" / "src").glob("*.cc"):
                (dest / "labs" / "01_point_to_point" / "src" / f.name).write_text(f.read_text())
            grade = [sys.executable, str(dest / "grader" / "grade.py"), "01", "--no-sandbox"]
            work = subprocess.run(grade, capture_output=True, text=True, timeout=600)
            skel = subprocess.run(grade + ["--skeleton"], capture_output=True, text=True, timeout=600)
        self.assertRegex(work.stdout, r"TOTAL\s+(\d+) / \1\b", work.stdout[-2000:] + work.stderr[-2000:])
        # The total is not the whole grade, and the student is told so.
        self.assertRegex(work.stdout, r"\d+ more points come from hidden tests .* graded by your instructor")
        self.assertRegex(skel.stdout, r"TOTAL\s+0 / \d+", skel.stdout[-2000:] + skel.stderr[-2000:])


class TestFailUnder(unittest.TestCase):
    def test_exit_status_follows_the_score(self):
        run = helpers.grade("--skeleton", "--fail-under", "100", lab="01")
        self.assertEqual(run.returncode, 1, run.output[-2000:])
        self.assertRegex(run.output, r"grade: 0 / \d+ is below --fail-under 100%")
        bad = subprocess.run([sys.executable, str(ROOT / "grader" / "grade.py"), "01", "--fail-under", "150"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--fail-under 150: a percentage from 0 to 100", bad.stderr)


if __name__ == "__main__":
    unittest.main()
