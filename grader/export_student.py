#!/usr/bin/env python3
"""./dtl export-student DIR: the repository a course hands to its students.

What a student repository holds, and what it must not:

  kept     labs/ (handouts, headers, generated skeletons, given code, public tests,
           benchmarks), harness/, datasets/, examples/, cmake/, slides/, the grader
           (package, rubrics, entry point), dtl, README.md, the build files;
  dropped  reference/ (the solutions), grader/hidden/ (the hidden tests),
           grader/tests/ (the grader's own tests, which grade the references),
           grader/gradescope/ (the instructors' package), grader/skeleton.py (the
           generator, which reads reference/), .ci/ (this project's CI);
  added    grader/skeletons/NN_topic/src (a copy of each untouched skeleton, which the
           grader uses once labs/NN/src holds the student's work),
           .github/workflows/classroom.yml (GitHub Classroom's autograding
           convention: one command-grader step per lab, then the reporter) and a
           first commit, so the folder can be pushed as the assignment's template.

Only files git tracks are copied (nothing built, nothing ignored). Student-facing
text talks only about what the student has: blocks marked "instructors only" in the
READMEs are dropped, and the decks' links to reference/NN_topic/src/ point at the
student's own labs/NN_topic/src/ (the Notes they cite are outside the solution
blocks, so the skeleton holds them too). The export is checked after it is written:
it refuses to finish if a solution or a hidden test slipped in (a file under a
dropped folder, or a `BEGIN SOLUTION` marker anywhere), or if a student-facing text
(the READMEs, the handouts, the results, the decks, `./dtl help`) still names
reference/, the solution generator, or a hidden test suite.

Hints: each handout task may carry graded hints (Hint 1 points the way, Hint 2 names
the idea, Hint 3 is nearly the answer), each a <details> element between
`<!-- hint N -->` and `<!-- /hint -->` lines (labs/README.md, "Hints").
`--hints all` (the default) keeps them all, `some` keeps Hint 1 only, `none` drops
every one; the marker lines themselves never reach the student repository.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DROPPED = ("reference/", "grader/hidden/", "grader/tests/", "grader/gradescope/", "grader/skeleton.py", ".ci/")
SOLUTION_MARKER = "BEGIN SOLUTION"

# Blocks of the READMEs that only make sense with reference/ and the generator at hand.
INSTRUCTORS_ONLY = re.compile(r"<!-- instructors only: begin.*?-->.*?<!-- instructors only: end -->\n?", re.S)
# A graded hint in a handout: `<!-- hint N -->` line, the <details> element, `<!-- /hint -->` line.
HINT_BLOCK = re.compile(r"^<!-- hint (?P<level>[1-9]) -->\n(?P<body>.*?)^<!-- /hint -->\n?", re.S | re.M)
HINT_MARKER = re.compile(r"<!-- */?hint\b[^>]*-->")
# --hints LEVEL: the highest hint number kept.
HINT_LEVELS = {"none": 0, "some": 1, "all": 3}

# What a student-facing text must not name in a student repository.
NOT_FOR_STUDENTS = ("reference/", "./dtl generate", "skeleton.py", "solution generator")

WORKFLOW_HEAD = """\
# GitHub Classroom autograding for dtlabs (written by ./dtl export-student).
#
# One step per lab: `./dtl grade NN --fail-under 100` builds your labs/NN_*/src in a
# clean tree, runs the public tests under MPI and passes only with full marks; the
# reporter adds up the steps' max-score. The per-item table is in each step's log,
# and every lab's results.json is kept as an artifact.
# Instructors: delete the steps of labs the assignment does not cover (and their
# entries in the reporter's env and runners), or change max-score.
name: Autograding Tests
'on': [push, workflow_dispatch, repository_dispatch]
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    container: debian:12
    timeout-minutes: 120
    if: github.actor != 'github-classroom[bot]'
    steps:
      - name: Checkout code
        uses: actions/checkout@v4
      - name: Set up (Debian packages; ./dtl setup)
        run: |
          apt-get update -qq && apt-get install -y -qq python3 git >/dev/null
          ./dtl setup
          ./dtl build
"""

WORKFLOW_STEP = """\
      - name: Lab {lab}
        id: lab{lab}
        uses: classroom-resources/autograding-command-grader@v1
        with:
          test-name: Lab {lab}
          setup-command: ''
          command: ./dtl grade {lab} --no-sandbox --json results-{lab}.json --fail-under 100
          timeout: 30
          max-score: 100
"""

WORKFLOW_TAIL = """\
      - name: Keep the results
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: dtlabs-results
          path: results-*.json
      - name: Autograding Reporter
        uses: classroom-resources/autograding-grading-reporter@v1
        env:
{env}        with:
          runners: {runners}
"""


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def is_dropped(path: str) -> bool:
    return any(path == d or path.startswith(d) for d in DROPPED)


def lab_numbers(root: Path) -> list[str]:
    return sorted(p.name[:2] for p in (root / "labs").iterdir() if p.is_dir() and p.name[:2].isdigit())


def workflow(labs: list[str]) -> str:
    # The container runs as root and GitHub's runners refuse the user namespaces that
    # bubblewrap needs, hence --no-sandbox: a student's own CI runs the student's own code.
    steps = "".join(WORKFLOW_STEP.format(lab=lab) for lab in labs)
    env = "".join(f"          LAB{lab}_RESULTS: \"${{{{steps.lab{lab}.outputs.result}}}}\"\n" for lab in labs)
    return WORKFLOW_HEAD + steps + WORKFLOW_TAIL.format(env=env, runners=",".join(f"lab{lab}" for lab in labs))


def student_doxyfile(text: str) -> str:
    """The Doxyfile without reference/ in INPUT (it is not there to document)."""
    lines = []
    for line in text.splitlines():
        if line.split("=")[0].strip() == "INPUT":
            key, value = line.split("=", 1)
            line = key + "= " + " ".join(w for w in value.split() if w != "reference")
        lines.append(line)
    return "\n".join(lines) + "\n"


def student_facing(dest: Path) -> list[Path]:
    """The texts a student reads: the READMEs at the top and of labs/, each handout, each deck."""
    files = [dest / "README.md", dest / "labs" / "README.md"]
    files += sorted((dest / "labs").glob("[0-9][0-9]_*/README.md"))
    files += sorted((dest / "labs").glob("[0-9][0-9]_*/bench/RESULTS.md"))
    files += sorted((dest / "slides").rglob("*.md"))
    return [f for f in files if f.is_file()]


def hint_problems(text: str) -> list[str]:
    """Malformed hint markers in a handout: [] when every `<!-- hint N -->` (N = 1, 2, 3)
    opens a line, holds one <details> element and is closed by `<!-- /hint -->` before the next."""
    problems = []
    for m in HINT_BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        body = m.group("body").strip()
        if int(m.group("level")) not in (1, 2, 3):
            problems.append(f"line {line}: hint {m.group('level')}: hints are numbered 1, 2 and 3")
        if not (body.startswith("<details>") and body.endswith("</details>")) or HINT_MARKER.search(body):
            problems.append(f"line {line}: a hint block holds exactly one <details> element, nothing else")
    left = HINT_MARKER.findall(HINT_BLOCK.sub("", text))
    if left:
        problems.append(f"unmatched hint markers: {', '.join(left)}")
    return problems


def with_hints(text: str, hints: str) -> str:
    """The handout with the hints that `--hints` keeps (none, some: Hint 1 only, all),
    without the marker lines."""
    if hints not in HINT_LEVELS:
        raise ValueError(f"--hints {hints}: choose one of {', '.join(HINT_LEVELS)}")
    keep = HINT_LEVELS[hints]
    return HINT_BLOCK.sub(lambda m: m.group("body") if int(m.group("level")) <= keep else "", text)


def student_text(rel: str, text: str, hints: str = "all") -> str:
    """A student-facing file as the student repository holds it (`hints`: see with_hints)."""
    text = INSTRUCTORS_ONLY.sub("", text)
    if re.fullmatch(r"labs/\d\d_\w+/README\.md", rel):
        problems = hint_problems(text)
        if problems:
            raise SystemExit(f"export-student: {rel}: " + "; ".join(problems))
        text = with_hints(text, hints)
    if rel.startswith("slides/"):
        text = text.replace("reference: [`reference/", "your files: [`labs/")
        text = re.sub(r"\breference/(\d\d_\w+/src/)", r"labs/\1", text)
    return text


def with_hidden_points(rubric: str, points: float) -> str:
    """The rubric with `hidden_points = N` among its top-level keys (before the first table)."""
    line = (f"hidden_points = {points:g}  # written by ./dtl export-student: the hidden tests' points, "
            f"graded by the instructor\n")
    at = re.search(r"(?m)^\[", rubric)
    return rubric + "\n" + line if at is None else rubric[:at.start()] + line + "\n" + rubric[at.start():]


def hidden_suites(root: Path) -> set[str]:
    """The test suites of the hidden tests (TEST(Suite, ...) and its typed and fixture forms)."""
    suites = set()
    for source in (root / "grader" / "hidden").glob("*/*_test.cc"):
        suites |= set(re.findall(r"(?m)^\s*(?:TYPED_)?TEST(?:_F|_P)?\(\s*(\w+)\s*,", source.read_text()))
    return suites


def check_export(dest: Path, hidden: set[str] = frozenset()) -> list[str]:
    """What must not be in a student repository: the problems found, or []. `hidden`:
    the hidden tests' suite names, which no student-facing text may give away."""
    problems = []
    for d in DROPPED:
        if (dest / d.rstrip("/")).exists():
            problems.append(f"{d} was exported")
    for path in dest.rglob("*"):
        if ".git" in path.relative_to(dest).parts or not path.is_file():
            continue
        if path.suffix in (".cc", ".h", ".cu", ".cuh", ".py") and SOLUTION_MARKER in path.read_text(errors="replace"):
            if path.name != "export_student.py":  # this file names the marker it looks for
                problems.append(f"{path.relative_to(dest)} holds a solution block ({SOLUTION_MARKER})")
    for path in student_facing(dest):
        text = path.read_text(errors="replace")
        for word in NOT_FOR_STUDENTS:
            if word in text:
                problems.append(f"{path.relative_to(dest)} names {word!r}, which a student repository lacks")
        if HINT_MARKER.search(text):
            problems.append(f"{path.relative_to(dest)} still holds a hint marker ({HINT_MARKER.search(text).group()})")
        for suite in sorted(hidden):
            if re.search(rf"\b{suite}\b", text):
                problems.append(f"{path.relative_to(dest)} names the hidden test suite {suite}")
    if (dest / "dtl").is_file():
        shown = subprocess.run(["bash", str(dest / "dtl"), "help"], capture_output=True, text=True).stdout
        for word in NOT_FOR_STUDENTS:
            if word in shown:
                problems.append(f"./dtl help names {word!r}, which a student repository lacks")
    return problems


def export(dest: Path, root: Path = ROOT, commit: bool = True, hints: str = "all") -> list[str]:
    """Writes the student repository into `dest` (which must not exist or be empty), with
    the handouts' hints that `hints` keeps (none, some, all). Returns the exported paths,
    relative to dest."""
    if hints not in HINT_LEVELS:
        raise SystemExit(f"export-student: --hints {hints}: choose one of {', '.join(HINT_LEVELS)}")
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"export-student: {dest} exists and is not empty")
    for handout in sorted((root / "labs").glob("[0-9][0-9]_*/README.md")):
        problems = hint_problems(handout.read_text())
        if problems:
            raise SystemExit(f"export-student: {handout.relative_to(root)}: " + "; ".join(problems))
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for rel in tracked_files(root):
        if is_dropped(rel) or not (root / rel).is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
        if rel.endswith(".md"):
            text = (root / rel).read_text()
            changed = student_text(rel, text, hints)
            if changed != text:
                target.write_text(changed)
        copied.append(rel)
    (dest / "Doxyfile").write_text(student_doxyfile((root / "Doxyfile").read_text()))
    # The hidden tests stay behind; what they are worth goes along, so that grading in
    # the student repository can say that its total is not the whole grade.
    for hidden in sorted((root / "grader" / "hidden").glob("[0-9][0-9]_*/rubric.toml")):
        points = sum(float(i.get("points", 0)) for i in tomllib.loads(hidden.read_text()).get("item", []))
        rubric = dest / "grader" / "rubrics" / f"{hidden.parent.name[:2]}.toml"
        if points and rubric.is_file():
            rubric.write_text(with_hidden_points(rubric.read_text(), points))
    # The untouched skeletons: labs/NN/src becomes the student's work, and the grader
    # still needs the skeleton (--skeleton, files a submission lacks or may not keep).
    for lab_src in sorted((root / "labs").glob("[0-9][0-9]_*/src")):
        kept = dest / "grader" / "skeletons" / lab_src.parent.name / "src"
        shutil.copytree(lab_src, kept)
        copied += [str(p.relative_to(dest)) for p in kept.rglob("*") if p.is_file()]
    wf = dest / ".github" / "workflows" / "classroom.yml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(workflow(lab_numbers(root)))
    copied.append(".github/workflows/classroom.yml")
    problems = check_export(dest, hidden_suites(root))
    if problems:
        shutil.rmtree(dest)
        raise SystemExit("export-student: refused, removed the export:\n  " + "\n  ".join(problems))
    if commit:
        git = ["git", "-C", str(dest)]
        subprocess.run(git + ["init", "-q", "-b", "main"], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["-c", "user.name=dtlabs", "-c", "user.email=dtlabs@localhost", "commit", "-q", "-m",
                              "dtlabs: the labs, their skeletons and public tests"], check=True)
    return copied


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="./dtl export-student", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="where to write the student repository (new or empty)")
    parser.add_argument("--no-commit", action="store_true", help="do not make it a git repository")
    parser.add_argument("--hints", default="all", metavar="none|some|all",
                        help="the handouts' graded hints students get: none, some (Hint 1 of each task only) "
                             "or all (default)")
    args = parser.parse_args(argv)
    if args.hints not in HINT_LEVELS:
        parser.error(f"--hints {args.hints}: choose none (no hints), some (Hint 1 of each task) or all")
    dest = Path(args.dir).resolve()
    if dest == ROOT or ROOT in dest.parents:
        print(f"export-student: {dest} is inside this repository; choose a folder outside it", file=sys.stderr)
        return 2
    files = export(dest, commit=not args.no_commit, hints=args.hints)
    print(f"export-student: {len(files)} files in {dest} (no reference/, no hidden tests); "
          f"hints: {args.hints}; push it as the assignment's template. Students run ./dtl grade NN; "
          f"CI: .github/workflows/classroom.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
