"""Shared helpers of the grader's own tests: fake submissions and grader runs.

  make_submission()  writes a fake submission into a folder: the reference's
                     src/*.cc with the body of one solution block replaced;
  grade()            runs `python3 grader/grade.py 01 ... --json FILE` as a
                     subprocess and returns its exit code, printed output, time
                     and parsed JSON (a GradeRun); grade_reference() does it once
                     per process for the plain reference and shares the result;
                     all three work on lab 01 unless given lab="02" (LABS lists
                     each lab's folder and which file holds which function);
  mutated_body()     the reference's solution of a function with a few exact
                     text changes: a deliberate fault for make_submission();
  temp_folder()      a test class's temporary folder, removed after its tests;
  grade_kept()       grades a lab's reference with --keep for a test class, so
                     that its tests can change the graded tree, rebuild_kept()
                     the student test program and run_kept_tests() it;
  GraderAssertions   checks on a run's JSON (Gradescope's keys and types, items
                     at full marks or at 0), mixed into the test classes.

Importing this module also puts grader/ on sys.path, for the tests that call
the grader's package (dtlgrade) directly.

Nothing here writes inside the repository: submissions and JSON files go to
temporary folders that the callers own.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "grader"))  # the tests that unit-test the grader import dtlgrade
GRADE_PY = ROOT / "grader" / "grade.py"
LAB = "01"
LAB_NAME = "01_point_to_point"
REFERENCE_SRC = ROOT / "reference" / LAB_NAME / "src"
SKELETON_SRC = ROOT / "labs" / LAB_NAME / "src"
HIDDEN_EXAMPLE = ROOT / "grader" / "hidden" / LAB_NAME

# The graded functions and the reference file each lives in.
FUNCTION_FILES = {
    "ping_pong": "ping_pong.cc",
    "ring_shift": "ring.cc",
    "halo_exchange": "halo.cc",
    "fit_alpha_beta": "alpha_beta.cc",
}

# Every lab the grader tests use: its folder name and its FUNCTION_FILES.
LABS = {
    "01": (LAB_NAME, FUNCTION_FILES),
    "03": ("03_ring_allreduce", {
        "ring_step": "ring_schedule.cc",
        "reduce_scatter_ring": "ring_allreduce.cc",
        "allgather_ring": "ring_allreduce.cc",
        "allreduce_ring": "ring_allreduce.cc",
        "allreduce_ring_segmented": "ring_segmented.cc",
    }),
    "04": ("04_bucketed_ddp", {
        "Reducer::on_grad_ready": "ddp_reducer.cc",
        "Reducer::launch": "ddp_reducer.cc",
    }),
    "06": ("06_fsdp", {
        "ShardedTrainer::gather_for_use": "fsdp_gather.cc",
        "HybridCommunicator::do_reduce_scatter": "hybrid_shard.cc",
    }),
    "07": ("07_pipeline", {
        "one_f_one_b_schedule": "schedule.cc",
    }),
    "09": ("09_parameter_server", {
        "train_worker": "worker.cc",
        "ParameterServer::on_push": "server.cc",
        "ParameterServer::on_clock": "server.cc",
    }),
    "08": ("08_tensor_parallel", {
        "OverlappedRowParallelLinear::forward": "overlapped_linear.cc",
        "OverlappedRowParallelLinear::forward_sp": "overlapped_linear.cc",
    }),
    "02": ("02_collectives", {
        "broadcast_binomial": "broadcast.cc",
        "broadcast_scatter_allgather": "broadcast.cc",
        "broadcast": "broadcast.cc",
        "scatter": "scatter_gather.cc",
        "gather": "scatter_gather.cc",
        "reduce": "reduce.cc",
        "allgather_ring": "allgather.cc",
        "allgather_recursive_doubling": "allgather.cc",
        "alltoall_pairwise": "alltoall.cc",
    }),
}


def reference_src(lab: str = LAB) -> Path:
    """reference/NN_topic/src of lab `lab`."""
    return ROOT / "reference" / LABS[lab][0] / "src"

# Rubric items (grader/rubrics/01.toml and the example hidden rubric), grouped
# by the function they exercise; matched on the start of the item's name.
ITEM_PREFIXES = {
    "ping_pong": ("A. ping-pong",),
    "ring_shift": ("B. ring",),
    "halo_exchange": ("C. halo",),
    "fit_alpha_beta": ("D. alpha-beta",),
    # [[perf]] items: speed against the reference, scored once the ring is correct.
    "perf": ("Speed:",),
    # The example hidden rubric: one item mixes ring and ping-pong.
    "hidden_ring_ping_pong": ("Hidden: ring and ping-pong",),
    "hidden_halo": ("Hidden: halo",),
    # Lab 02 (grader/rubrics/02.toml and its example hidden rubric).
    "lab02_broadcast": ("A. broadcast",),
    "lab02_hidden_broadcast": ("Hidden: broadcast",),
    # Lab 03 (grader/rubrics/03.toml).
    "lab03_reduce_scatter": ("B. ring reduce-scatter",),
    "lab03_allreduce": ("B. ring allreduce",),
    "lab03_gpu": ("Part 2 D", "Part 2 E", "Part 2 G. "),  # not "Part 2 G2.": its CPU stand-in grades it
    # Labs 04 and 06 (grader/rubrics/04.toml, 06.toml): their one GPU item each.
    "lab04_gpu": ("GPU: ",),
    "lab06_gpu": ("GPU: ",),
}

# Whole-run bound for one grading in a test; a grader that takes longer has hung.
GRADE_TIMEOUT = 600

REQUIRED_TOP_KEYS = {"score": (int, float), "max_score": (int, float), "execution_time": (int, float),
                     "tests": list}
REQUIRED_TEST_KEYS = {"name": str, "score": (int, float), "max_score": (int, float), "status": str,
                      "output": str, "visibility": str}
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}

_BLOCK = r"(?P<begin>^[ \t]*// BEGIN SOLUTION\({name}\)[^\n]*\n)(?P<body>.*?)(?P<end>^[ \t]*// END SOLUTION[^\n]*\n)"


def replace_solution(text: str, function: str, body: str) -> str:
    """`text` with the inside of the `// BEGIN SOLUTION(function)` block replaced by
    `body`; the marker lines stay. Raises ValueError if there is no such block."""
    pattern = re.compile(_BLOCK.format(name=re.escape(function)), re.S | re.M)
    if not pattern.search(text):
        raise ValueError(f"no BEGIN SOLUTION({function}) block")
    body = body if body.endswith("\n") else body + "\n"
    return pattern.sub(lambda m: m.group("begin") + body + m.group("end"), text, count=1)


def reference_body(function: str, lab: str = LAB) -> str:
    """The reference's solution of `function` (the inside of its block, hint lines
    included), to build a submission that differs from it by a few lines."""
    text = (reference_src(lab) / LABS[lab][1][function]).read_text()
    match = re.compile(_BLOCK.format(name=re.escape(function)), re.S | re.M).search(text)
    if not match:
        raise ValueError(f"no BEGIN SOLUTION({function}) block")
    return match.group("body")


def mutated_body(function: str, lab: str, *changes: tuple[str, str]) -> str:
    """The reference's solution of `function` in lab `lab` with each (old, new) of
    `changes` applied in turn: a deliberate fault that follows the reference
    wherever else it changes. Raises ValueError naming the text if an `old` does
    not stand exactly once in the body (the reference changed under the test)."""
    body = reference_body(function, lab)
    for old, new in changes:
        if body.count(old) != 1:
            raise ValueError(f"the reference's {function} (lab {lab}) holds {body.count(old)} copies of {old!r}, "
                             "not 1: update the test's fault to the reference")
        body = body.replace(old, new)
    return body


def make_submission(dest: Path, function: str | None = None, body: str = "", includes: tuple[str, ...] = (),
                    source: Path | None = None, lab: str = LAB) -> Path:
    """Copies `source`'s sources (default: lab `lab`'s reference) into `dest` (created)
    and, if `function` is given, replaces its solution body with `body` and adds the
    `#include` lines in `includes` at the top of its file. Returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted((source or reference_src(lab)).iterdir()):
        if path.suffix in (".cc", ".h", ".cu", ".cuh"):
            shutil.copyfile(path, dest / path.name)
    if function is not None:
        target = dest / LABS[lab][1][function]
        text = replace_solution(target.read_text(), function, body)
        text = "".join(f"#include {inc}\n" for inc in includes) + text
        target.write_text(text)
    return dest


def temp_folder(cls) -> Path:
    """A temporary folder for a test class (call in setUpClass); removed after
    the class's tests, whatever their outcome."""
    tmp = tempfile.TemporaryDirectory(prefix="dtl-grader-test-")
    cls.addClassCleanup(tmp.cleanup)
    return Path(tmp.name)


@dataclass
class GradeRun:
    """One run of grade.py: exit code, stdout+stderr, wall time, parsed JSON (or None)."""
    returncode: int
    output: str
    seconds: float
    json: dict | None
    lab: str = LAB

    @property
    def grading_seconds(self) -> float:
        """The wall time less the course objects' build (or the wait for another
        grading's build of them): what the submission itself cost, the same with a
        cold prebuilt cache (CI's first grading of a lab) as with a warm one."""
        course = sum(float(s) for s in re.findall(
            r"^  course objects (?:built in|built by another grading; waited) (\d+) s", self.output, re.M))
        return self.seconds - course

    def speed_out(self) -> float:
        """The rubric points of the speed items this grading left out of the total
        (speed_left_out()): 0 on a quiet machine with a core for every rank."""
        from dtlgrade.lab import load_lab  # grader/ is on sys.path (above)
        points = {p.name: p.points for p in load_lab(self.lab, []).perf}
        return sum(points[t["name"]] for t in self.json["tests"] if t["name"] in points and speed_left_out(t))

    def items(self, group: str) -> list[dict]:
        """The JSON tests whose names start with one of ITEM_PREFIXES[group]."""
        prefixes = ITEM_PREFIXES[group]
        return [t for t in self.json["tests"] if t["name"].startswith(prefixes)]

    def item(self, name: str) -> dict:
        found = [t for t in self.json["tests"] if t["name"] == name]
        if len(found) != 1:
            raise AssertionError(f"{len(found)} JSON tests named {name!r}")
        return found[0]


_sandbox_works: bool | None = None


def sandbox_works() -> bool:
    """Whether bubblewrap can create namespaces on this machine (grader/dtlgrade/sandbox.py).
    Where it cannot (some containers), the grader tests grade with --no-sandbox,
    saying so once, and the tests of the sandbox itself skip."""
    global _sandbox_works
    if _sandbox_works is None:
        from dtlgrade import sandbox
        ok, why = sandbox.probe()
        if not ok:
            print(f"\n[grader tests] the sandbox cannot run here ({why}): grading with --no-sandbox",
                  file=sys.stderr)
        _sandbox_works = ok
    return _sandbox_works


def grade(*args: str, timeout: float = GRADE_TIMEOUT, lab: str = LAB, env: dict | None = None) -> GradeRun:
    """Runs `python3 grader/grade.py LAB *args --json FILE` from the repository root
    (with --no-sandbox where the sandbox cannot run: sandbox_works()), with `env`
    added to the environment (e.g. DTL_PREBUILT_DIR: a cache of its own).
    A grader still running after `timeout` seconds is killed and reported as a
    test failure (AssertionError), never as a hang of the suite."""
    if not sandbox_works() and "--no-sandbox" not in args:
        args = (*args, "--no-sandbox")
    with tempfile.TemporaryDirectory(prefix="dtl-grader-test-") as tmp:
        out = Path(tmp) / "results.json"
        cmd = [sys.executable, str(GRADE_PY), lab, *args, "--json", str(out)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, **(env or {})),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"grade.py did not finish within {timeout} s: {' '.join(cmd)}\n"
                                 f"{(e.output or '')[-3000:] if isinstance(e.output, str) else ''}") from e
        seconds = time.monotonic() - start
        data = json.loads(out.read_text()) if out.exists() else None
    return GradeRun(proc.returncode, proc.stdout, seconds, data, lab)


# Speed under a load (issue 31): with UNDER_LOAD in its environment the grader
# spins a process on one of its CPUs while it measures each speed item, and gives
# the share of a core it got (grader/dtlgrade/perf.py, Note [A load beside the
# measurement]); at least MIN_SHARE proves the load was there: about 2/3 on 2
# idle cores beside 2 ranks, less where other work shares the machine.
UNDER_LOAD = {"DTL_TEST_SPEED_LOAD": "1"}
MIN_SHARE = 0.2


def report_load(label: str, tests: list[dict]) -> None:
    """The speed rows graded under the load, on stderr: the numbers behind the verdicts."""
    for t in tests:
        if t["name"].startswith("Speed:"):
            data = t.get("extra_data", {})
            print(f"\n[under load, spinner at {data.get('load_share', 0):.0%} of a core] {label}: {t['name']}: "
                  f"{t['score']:g}/{t['max_score']:g} {t['output'].splitlines()[0][:60]!r} ratio {data.get('ratio')} "
                  f"spread {data.get('reference_spread')} pairs {data.get('pairs')} ranks {data.get('ranks')}",
                  file=sys.stderr)


def grade_kept(cls, lab: str, under_load: bool = False) -> None:
    """Grades lab `lab`'s reference with --keep for a test class (call in
    setUpClass): sets cls.graded (the GradeRun) and cls.work (the kept folder,
    with the graded tree in tree/ and its build in build/; None when grade.py
    printed no `kept` line). The folder is removed after the class's tests.
    `under_load`: its speed items are measured beside a spinning process
    (UNDER_LOAD), and their rows printed (report_load())."""
    cls.graded = grade("--reference", "--keep", lab=lab, env=UNDER_LOAD if under_load else None)
    if under_load:
        report_load(f"lab {lab} reference", cls.graded.json["tests"] if cls.graded.json else [])
    kept = re.search(r"^kept (\S+)$", cls.graded.output, re.M)
    cls.work = Path(kept.group(1)) if kept else None
    if cls.work is not None:
        cls.addClassCleanup(shutil.rmtree, cls.work, True)


def run_kept_tests(work: Path, lab: str, ranks: int, *gtest_args: str,
                   timeout: float = 120) -> tuple[int, str, float]:
    """Runs the student test program of lab `lab` in a kept folder (grade_kept())
    under mpiexec at `ranks` ranks with `gtest_args`, as the grader would (its MPI
    environment, oversubscribed, unbound). Returns the exit code, stdout+stderr
    and the wall time; a run still going after `timeout` seconds is a test failure."""
    from dtlgrade.process import MPI_ENV  # grader/ is on sys.path (above)
    from dtlgrade.turns import work_turn
    folder = next((ROOT / "labs").glob(f"{lab}_*")).name
    binary = work / "build" / "labs" / folder / f"lab{lab}_student_test"
    if not binary.is_file():
        raise AssertionError(f"no student test program in the kept folder: {binary}")
    cmd = [shutil.which("mpiexec") or "mpiexec", "--oversubscribe", "--bind-to", "none", "-n", str(ranks),
           str(binary), *gtest_args]
    env = dict(os.environ, **MPI_ENV, GTEST_COLOR="no")
    with work_turn():  # as a grading's run: never beside another grading's speed item
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout} s") from e
        return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def rebuild_kept(work: Path, lab: str, *targets: str) -> subprocess.CompletedProcess:
    """Rebuilds only lab `lab`'s student test program (or the `targets` given, e.g.
    "lab07_student_bench") in a kept folder, after a test has changed a file of its
    graded tree (work/tree). The kept build folder is ninja's (the course's objects
    are prebuilt: grader/dtlgrade/prebuilt.py)."""
    from dtlgrade.turns import work_turn  # grader/ is on sys.path (above)
    targets = targets or (f"lab{lab}_student_test",)
    with work_turn():  # as a grading's build: never beside another grading's speed item
        return subprocess.run(["ninja", "-C", str(work / "build"), *targets],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=300)


def mutate_kept(work: Path, lab: str, function: str, body: str) -> None:
    """Replaces the solution of `function` in the kept graded tree's copy of lab
    `lab`'s src/ (the reference's, when the reference was graded) with `body`: a
    fault, to rebuild with rebuild_kept() and measure beside the reference."""
    folder, files = LABS[lab]
    path = work / "tree" / "labs" / folder / "src" / files[function]
    path.write_text(replace_solution(path.read_text(), function, body))


def kept_speed(work: Path, lab: str, name: str):
    """Measures the speed item `name` of lab `lab` in a kept folder as a grading
    would (perf.score_perf(): pairs of runs, the noise guard, the machine's speed
    lock), the kept build's student benchmark beside its reference benchmark.
    Returns the PerfResult; its `output` gives the ratio and every pair. Cheaper
    than grading a fault again: only what the fault changed is rebuilt."""
    from dtlgrade.lab import load_lab  # grader/ is on sys.path (above)
    from dtlgrade.perf import score_perf, speed_turn
    item = next(p for p in load_lab(lab, []).perf if p.name == name)
    exe = work / "build" / "labs" / LABS[lab][0]
    runs = Path(tempfile.mkdtemp(prefix="speed-", dir=work))
    with speed_turn(lambda text: print(text, file=sys.stderr, flush=True)):
        return score_perf(item, item.ranks, exe / f"lab{lab}_student_bench", exe / f"lab{lab}_bench", runs,
                          lambda _: None)


_reference_run: GradeRun | None = None


def grade_reference() -> GradeRun:
    """`grade.py 01 --reference` (example hidden tests included), run once per
    process and shared by every test that needs the reference's results."""
    global _reference_run
    if _reference_run is None:
        _reference_run = grade("--reference")
    return _reference_run


# Why a speed item may be left out of the total (grader/dtlgrade/perf.py): more ranks
# than the grader's cores, or a machine too noisy to tell the submission from the
# reference. Either is a fair outcome for the reference; a lower score is not.
SPEED_LEFT_OUT = ("not gradable here", "too noisy to grade speed here")


def speed_left_out(test: dict) -> bool:
    """Whether a JSON test is a speed item left out of the total, saying why."""
    return (test["name"].startswith("Speed:") and test["max_score"] == 0 and test["score"] == 0
            and test["output"].startswith(SPEED_LEFT_OUT))


def gpu_left_out(test: dict) -> bool:
    """Whether a JSON test is a GPU item reported, not graded, on a machine without a
    GPU (grader/dtlgrade/score.py, not_gradable_row()): out of the total, neither 0 nor full."""
    return test["max_score"] == 0 and test["score"] == 0 and test["output"].startswith("not gradable without a GPU")


def clipped(text: str, head: int = 1500, tail: int = 2500) -> str:
    """`text` whole when short, else its first `head` and last `tail` characters:
    an item's output opens with what failed and ends with the ranks' last words."""
    return text if len(text) <= head + tail else f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


class GraderAssertions:
    """Assertions shared by the test classes; mix in before unittest.TestCase."""

    def assertLoadWasThere(self, tests: list[dict]) -> None:
        """Every speed item measured under UNDER_LOAD had its spinner beside it, at
        MIN_SHARE of a core or more (items left out unmeasured had nothing to load)."""
        for t in tests:
            share = t.get("extra_data", {}).get("load_share")
            if t["name"].startswith("Speed:") and "ratio" in t.get("extra_data", {}):
                self.assertIsNotNone(share, f"{t['name']}: measured without the load")
                self.assertGreater(share, MIN_SHARE, f"{t['name']}: the load was not there")

    def assertReferenceFullMarks(self, run: GradeRun, total: float, items: int | None = None) -> None:
        """`--reference`: exit 0, Gradescope's JSON, `total` of `total` points (in
        `items` items when given), every item at full marks."""
        self.assertEqual(run.returncode, 0, run.output[-3000:])
        self.assertGradescopeJson(run)
        if items is not None:
            self.assertEqual(len(run.json["tests"]), items)
        # Items first: a failed item's output says which test, rank and value; a total alone does not.
        self.assertFullMarks(run.json["tests"])
        self.assertEqual(run.json["score"], total - run.speed_out())
        self.assertEqual(run.json["max_score"], total - run.speed_out())

    def assertSkeletonZeroFast(self, run: GradeRun, seconds: float = 90) -> None:
        """`--skeleton`: 0 points within `seconds`, no timeout or crash, and every
        item saying what is not implemented yet (a speed item: that speed counts
        only for a correct solution)."""
        self.assertEqual(run.returncode, 0, run.output[-3000:])
        self.assertGradescopeJson(run)
        self.assertEqual(run.json["score"], 0)
        # A speed item may be left out (fewer cores than its ranks): not scored, no status.
        self.assertZero([t for t in run.json["tests"] if not speed_left_out(t) and not gpu_left_out(t)])
        self.assertLess(run.grading_seconds, seconds, "the skeleton must fail fast, not time out")
        self.assertNotIn("TIMEOUT", run.output)
        self.assertNotIn("CRASHED", run.output)
        for t in run.json["tests"]:
            if gpu_left_out(t):  # a GPU item without a GPU: reported, not run
                continue
            if t["name"].startswith("Speed:"):  # speed counts only once the items it requires pass
                if not speed_left_out(t):
                    self.assertIn("speed counts only for a correct solution", t["output"], t["name"])
                continue
            self.assertIn("is not implemented yet", t["output"], t["name"])

    def assertGradescopeJson(self, run: GradeRun) -> None:
        """The JSON exists and has Gradescope's keys with the right types; the
        total is the sum of the items."""
        self.assertIsNotNone(run.json, f"no JSON written; grader output:\n{run.output[-3000:]}")
        data = run.json
        for key, types in REQUIRED_TOP_KEYS.items():
            self.assertIn(key, data)
            self.assertIsInstance(data[key], types, key)
            self.assertNotIsInstance(data[key], bool, key)
        self.assertGreater(len(data["tests"]), 0)
        for test in data["tests"]:
            # An item reported but not graded (a GPU item without a GPU) has no
            # status: Gradescope's status is only "passed" or "failed".
            reported_only = test.get("max_score") == 0 and ("not gradable" in test.get("output", "")
                                                            or "too noisy" in test.get("output", ""))
            for key, types in REQUIRED_TEST_KEYS.items():
                if key == "status" and reported_only:
                    self.assertNotIn(key, test, test.get("name"))
                    continue
                self.assertIn(key, test, f"test {test.get('name')!r} lacks {key!r}")
                self.assertIsInstance(test[key], types, f"{test.get('name')!r}: {key}")
            if not reported_only:
                self.assertIn(test["status"], {"passed", "failed"}, test["name"])
            self.assertIn(test["visibility"], VISIBILITIES, test["name"])
            self.assertGreaterEqual(test["score"], 0)
            self.assertLessEqual(test["score"], test["max_score"], test["name"])
        self.assertAlmostEqual(data["score"], sum(t["score"] for t in data["tests"]), places=2)
        self.assertAlmostEqual(data["max_score"], sum(t["max_score"] for t in data["tests"]), places=2)

    def assertFullMarks(self, tests: list[dict]) -> None:
        """Every test passed with its full points; a speed item may instead be left
        out of the total with its reason (speed_left_out()), never scored lower."""
        self.assertTrue(tests, "no items to check")
        for t in tests:
            if speed_left_out(t) or gpu_left_out(t):
                continue
            self.assertEqual(t["status"], "passed", f"{t['name']}:\n{clipped(t['output'])}")
            self.assertEqual(t["score"], t["max_score"], t["name"])
            self.assertGreater(t["max_score"], 0, t["name"])

    def assertZero(self, tests: list[dict]) -> None:
        self.assertTrue(tests, "no items to check")
        for t in tests:
            self.assertEqual(t["status"], "failed", t["name"])
            self.assertEqual(t["score"], 0, t["name"])

    def assertOnlyGroupsFail(self, run: GradeRun, groups: tuple[str, ...]) -> None:
        """The items of `groups` (keys of ITEM_PREFIXES) score 0; every other item
        gets full points, and the total is exactly their points."""
        failing = [t for g in groups for t in run.items(g)]
        self.assertZero([t for t in failing if not t["output"].startswith("not gradable here")])  # too few cores
        rest = [t for t in run.json["tests"] if t not in failing]
        self.assertFullMarks(rest)
        self.assertEqual(run.json["score"], sum(t["max_score"] for t in rest))
