#!/usr/bin/env python3
"""The dtlabs autograder: ./dtl grade NN [options].

What it does, in order (see grader/README.md for the contract):
  1. takes the lab's src/ files from the submission (a folder holding them, or a
     checkout of the repository) -- only file names that exist in the lab's src/,
     only regular files; everything else is ignored and listed;
  2. copies a pristine tree (CMake, cmake/, harness/, the lab's tests, headers and
     hidden tests) from this repository into a fresh folder and drops the
     submission's files into labs/NN_topic/src there: tests, headers and harness
     are never the student's;
  3. configures and builds only that lab's student test binaries; a build that
     fails scores 0 with the compiler's errors;
  4. runs each test binary under mpirun at every rank count the rubric names, in
     its own session, with a per-test timeout (the test main's watchdog) and a
     grader-side limit on time and output; a crash, a hang or a flood costs the
     tests it hit and the run resumes with the remaining tests;
  5. scores the rubric (grader/rubrics/NN.toml plus hidden rubrics), prints a
     table and writes Gradescope's results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SOURCE_BYTES = 1 << 20          # a single submitted file larger than this is refused
OUTPUT_KEEP_HEAD = 48 << 10         # bytes of a run's output kept from its start...
OUTPUT_KEEP_TAIL = 16 << 10         # ...and from its end
OUTPUT_FLOOD_BYTES = 16 << 20       # more output than this ends the run as a flood
TEST_OUTPUT_CAP = 4000              # characters of output kept per Gradescope test
BUILD_TIMEOUT = 900                 # seconds for configure + build
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}


class GraderError(Exception):
    """A problem with the grader's own set-up (bad lab number, bad rubric), never a submission's."""


# ---------------------------------------------------------------------------
# The lab and its rubric
# ---------------------------------------------------------------------------

@dataclass
class Item:
    name: str
    points: float
    tests: list[str]
    ranks: list[int]
    binary: str = "test"
    visibility: str = "visible"
    timeout: float = 10.0
    gpu: bool = False


@dataclass
class PerfItem:
    """Points for speed: the submission's benchmark row against the reference's,
    measured as `runs` pairs of runs in alternating order; the score follows the
    median of the per-pair ratios (full at or below full_at, none at or above
    zero_at, linear between). Scored only when the items in `requires` passed.

    The default counter, `ratio`, is each run's own time/vendor ratio (the row
    times the implementation and the vendor call back to back, in one process),
    so what the grader compares is (submission/vendor) / (reference/vendor):
    a machine that is slower during one run slows both halves of that run."""
    name: str
    points: float
    bench: str                 # benchmark row, e.g. "RingShift/4 MiB"
    counter: str = "ratio"     # the row's counter to compare (lower is better)
    ranks: int = 2
    runs: int = 5
    full_at: float = 1.5
    zero_at: float = 3.0
    requires: list[str] = field(default_factory=list)
    visibility: str = "visible"


@dataclass
class Lab:
    number: str
    name: str                  # e.g. 01_point_to_point
    title: str
    items: list[Item]
    perf: list[PerfItem] = field(default_factory=list)
    needs_cuda: bool = False
    depends: list[str] = field(default_factory=list)  # labs whose library this one links (dependency_labs())

    @property
    def src_names(self) -> list[str]:
        """The gradable file names: those of the reference, or (in a repository
        exported to students, without reference/) those of the skeleton."""
        src = ROOT / "reference" / self.name / "src"
        if not src.is_dir():
            src = ROOT / "labs" / self.name / "src"
        return sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())


def src_names_of(lab_name: str) -> list[str]:
    """The gradable file names of any lab (see Lab.src_names)."""
    src = ROOT / "reference" / lab_name / "src"
    if not src.is_dir():
        src = ROOT / "labs" / lab_name / "src"
    return sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())


def dependency_labs(lab_name: str) -> list[str]:
    """The labs whose library lab `lab_name` links: `FLAVORED_LIBS dtl_labNN` in its
    CMakeLists.txt (cmake/DtlAddLab.cmake), and theirs in turn. Lab 04's ring backend
    is the student's own lab-03 ring, so grading lab 04 builds lab 03 too, from the
    same submission when it holds lab 03's files (install_dependencies())."""
    found: list[str] = []
    todo = [lab_name]
    while todo:
        cmake = ROOT / "labs" / todo.pop() / "CMakeLists.txt"
        text = cmake.read_text() if cmake.exists() else ""
        for block in re.findall(r"FLAVORED_LIBS([^)]*)", text):
            for number in re.findall(r"dtl_lab(\d\d)", block):
                name = find_lab(number)
                if name != lab_name and name not in found:
                    found.append(name)
                    todo.append(name)
    return found


def find_lab(number: str) -> str:
    number = f"{int(number):02d}" if number.isdigit() else number
    found = sorted(p.name for p in (ROOT / "labs").glob(f"{number}_*") if p.is_dir())
    if not found:
        labs = ", ".join(sorted(p.name[:2] for p in (ROOT / "labs").glob("[0-9][0-9]_*")))
        raise GraderError(f"no lab {number!r} (labs: {labs})")
    return found[0]


def parse_items(data: dict, default_timeout: float, default_binary: str, origin: str) -> list[Item]:
    items = []
    for raw in data.get("item", []):
        try:
            binary = raw.get("binary", default_binary)
            if binary not in BINARY_KINDS:
                raise ValueError(f"binary {binary!r} is not one of {', '.join(BINARY_KINDS)}")
            items.append(Item(name=raw["name"], points=float(raw["points"]), tests=list(raw["tests"]),
                              ranks=[int(r) for r in raw["ranks"]],
                              binary=binary,
                              visibility=raw.get("visibility", "visible"),
                              timeout=float(raw.get("timeout", default_timeout)),
                              # the GPU test binary's items need a GPU, whatever the rubric says
                              gpu=bool(raw.get("gpu", False)) or binary == "gpu"))
        except (KeyError, TypeError, ValueError) as e:
            raise GraderError(f"{origin}: bad item {raw.get('name', raw)!r}: {e}") from e
    return items


# The test binaries an item can name, and the CMake target of each (dtl_add_lab):
# tests/*_test.cc, grader/hidden/NN_topic/*_test.cc, tests/*_gpu_test.cc.
BINARY_KINDS = {"test": "lab{n}_student_test", "hidden": "lab{n}_student_hidden", "gpu": "lab{n}_student_gpu"}


def binaries_for(lab: Lab, has_hidden: bool, gpu: bool) -> dict[str, str]:
    """The test binaries to build and run, by kind: always the public tests; the
    hidden ones when there are hidden tests; the GPU ones when an item names them
    and there is a GPU to run them (without one their items are not gradable, so
    the binary is not even built)."""
    kinds = ["test"] + (["hidden"] if has_hidden else [])
    if gpu and any(i.binary == "gpu" for i in lab.items):
        kinds.append("gpu")
    return {k: BINARY_KINDS[k].format(n=lab.number) for k in kinds}


def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GraderError(f"{path}: {e}") from e


def load_lab(number: str, hidden_dirs: list[Path]) -> Lab:
    name = find_lab(number)
    rubric = ROOT / "grader" / "rubrics" / f"{name[:2]}.toml"
    if not rubric.exists():
        raise GraderError(f"no rubric for lab {name[:2]}: {rubric} is missing")
    data = read_toml(rubric)
    if str(data.get("lab", name[:2])) != name[:2]:
        raise GraderError(f"{rubric}: says lab = {data['lab']!r}, but it is the rubric of lab {name[:2]}")
    timeout = float(data.get("timeout", 10))
    items = parse_items(data, timeout, "test", str(rubric))
    for folder in hidden_dirs:
        hidden_rubric = folder / "rubric.toml"
        if hidden_rubric.exists():
            items += parse_items(read_toml(hidden_rubric), timeout, "hidden", str(hidden_rubric))
    perf = []
    for raw in data.get("perf", []):
        try:
            perf.append(PerfItem(**raw))
        except TypeError as e:
            raise GraderError(f"{rubric}: bad perf item {raw.get('name', raw)!r}: {e}") from e
    names = {i.name for i in items}
    for p in perf:
        missing = [r for r in p.requires if r not in names]
        if missing:
            raise GraderError(f"{rubric}: perf item {p.name!r} requires unknown items {missing}")
    return Lab(number=name[:2], name=name, title=data.get("title", name), items=items, perf=perf,
               needs_cuda=bool(data.get("cuda", False)), depends=dependency_labs(name))


# ---------------------------------------------------------------------------
# The submission and the pristine tree
# ---------------------------------------------------------------------------

def submission_sources(lab: Lab, args) -> tuple[Path, str]:
    """Returns (folder holding the lab's src files, a description of it)."""
    if args.reference:
        return ROOT / "reference" / lab.name / "src", "the reference solution"
    if args.skeleton:
        return ROOT / "labs" / lab.name / "src", "the student skeleton"
    if args.submission is None:
        return ROOT / "labs" / lab.name / "src", f"your work in labs/{lab.name}/src"
    sub = Path(args.submission).resolve()
    if not sub.is_dir():
        raise GraderError(f"--submission {sub}: not a folder")
    for candidate in (sub / "labs" / lab.name / "src", sub / "src", sub):
        if candidate.is_dir() and any((candidate / n).is_file() for n in lab.src_names):
            return candidate, f"submission {candidate}"
    return sub, f"submission {sub} (none of {', '.join(lab.src_names)} found)"


def copy_pristine_tree(lab: Lab, dest: Path, hidden_dirs: list[Path]) -> None:
    """Everything the build needs, from this repository; never from the submission."""
    for name in ("CMakeLists.txt", "CMakePresets.json"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    labs = [lab.name] + lab.depends  # the labs this one links are built with it (dependency_labs())
    for folder in ("cmake", "harness", "datasets", *[f"{top}/{name}" for name in labs for top in ("labs", "reference")]):
        if (ROOT / folder).is_dir():  # reference/ is absent from a student repository
            # datasets/: the library only (labs 04-07 link it); not its tests or fetched data.
            skip = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "data") if folder == "datasets" else ignore
            shutil.copytree(ROOT / folder, dest / folder, ignore=skip)
    hidden_dest = dest / "grader" / "hidden" / lab.name
    hidden_dest.mkdir(parents=True)
    for i, folder in enumerate(hidden_dirs):
        for src in sorted(folder.glob("*_test.cc")):
            target = hidden_dest / (src.name if i == 0 else f"extra{i}_{src.name}")
            shutil.copy2(src, target)


def install_submission(lab: Lab, source: Path, dest_src: Path, also_used: set[str] = frozenset()) -> list[str]:
    """Copies the allowed files; returns notes on what was missing or ignored
    (`also_used`: names another step takes, e.g. a dependency lab's files)."""
    notes = []
    allowed = set(lab.src_names) | set(also_used)
    for rel in lab.src_names:
        src = source / rel
        if src.is_symlink() or not src.is_file():
            notes.append(f"{rel}: not in the submission; graded as the skeleton's (not implemented)")
            continue
        if src.stat().st_size > MAX_SOURCE_BYTES:
            notes.append(f"{rel}: larger than {MAX_SOURCE_BYTES} bytes; graded as the skeleton's")
            continue
        shutil.copyfile(src, dest_src / rel)
    if source.is_dir():
        extra = sorted(str(p.relative_to(source)) for p in source.rglob("*")
                       if p.is_file() and str(p.relative_to(source)) not in allowed
                       and "/." not in f"/{p.relative_to(source)}")
        if extra:
            shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
            notes.append(f"ignored (only {', '.join(lab.src_names)} are graded): {shown}")
    return notes


def dependency_sources(dep: str, source: Path, args) -> tuple[Path | None, str]:
    """Where the submission's files of dependency lab `dep` are: the reference's for
    --reference, none (the skeleton stays) for --skeleton, your own labs/<dep>/src by
    default, and for --submission DIR the first of DIR/labs/<dep>/src, DIR/<dep>/src,
    and the lab's own source folder that holds at least one of dep's file names."""
    if args.reference:
        return ROOT / "reference" / dep / "src", "the reference"
    if args.skeleton:
        return None, "the skeleton"
    if args.submission is None:
        return ROOT / "labs" / dep / "src", f"your labs/{dep}/src"
    sub = Path(args.submission).resolve()
    names = src_names_of(dep)
    for candidate in (sub / "labs" / dep / "src", sub / dep / "src", sub / dep, source):
        if candidate.is_dir() and any((candidate / n).is_file() for n in names):
            return candidate, f"{candidate}"
    return None, "the skeleton"


def install_dependencies(lab: Lab, source: Path, tree: Path, args) -> list[str]:
    """Copies the submission's files of each dependency lab into the tree (same rules
    as install_submission()); returns notes saying where they came from."""
    notes = []
    for dep in lab.depends:
        folder, where = dependency_sources(dep, source, args)
        if folder is None:
            notes.append(f"lab {dep[:2]} (which lab {lab.number} builds on): graded with {where}'s files; "
                         f"the items that need it fail with NotImplemented")
            continue
        names = src_names_of(dep)
        missing = []
        for rel in names:
            src = folder / rel
            if src.is_symlink() or not src.is_file() or src.stat().st_size > MAX_SOURCE_BYTES:
                missing.append(rel)
                continue
            shutil.copyfile(src, tree / "labs" / dep / "src" / rel)
        note = f"lab {dep[:2]} (which lab {lab.number} builds on): files from {where}"
        if missing:
            note += f"; not found there, so the skeleton's: {', '.join(missing)}"
        notes.append(note)
    return notes


# ---------------------------------------------------------------------------
# Running a command: own session, time limit, capped output
# ---------------------------------------------------------------------------

@dataclass
class RunResult:
    returncode: int | None
    output: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False


def kill_session(sid: int) -> None:
    """Kills every process in session `sid` (mpirun and all the ranks it started)."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue


def run_capped(cmd: list[str], env: dict, cwd: Path, limit: float,
               on_timeout=None) -> RunResult:
    """Runs `cmd` in a new session; kills the whole session after `limit` seconds or
    after OUTPUT_FLOOD_BYTES of output. Keeps the head and the tail of the output."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    head, tail = bytearray(), bytearray()
    total = [0]
    flooded = threading.Event()

    def reader():
        while chunk := proc.stdout.read1(65536):
            total[0] += len(chunk)
            if len(head) < OUTPUT_KEEP_HEAD:
                take = OUTPUT_KEEP_HEAD - len(head)
                head.extend(chunk[:take])
                chunk = chunk[take:]
            tail.extend(chunk)
            del tail[:-OUTPUT_KEEP_TAIL]
            if total[0] > OUTPUT_FLOOD_BYTES and not flooded.is_set():
                flooded.set()
                kill_session(proc.pid)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    timed_out = False
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        if on_timeout is not None:
            on_timeout()
        kill_session(proc.pid)
        proc.wait()
    kill_session(proc.pid)  # ranks left behind by a crashed mpirun
    thread.join(timeout=5)
    text = head.decode(errors="replace")
    if total[0] > len(head) + len(tail):
        text += f"\n... [{total[0] - len(head) - len(tail)} bytes of output cut] ...\n"
    text += tail.decode(errors="replace")
    return RunResult(proc.returncode, text, time.monotonic() - start, timed_out, flooded.is_set())


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------

def compiler_errors(output: str, limit: int = 6000) -> str:
    """The compiler's error lines with a little context, not the whole build log."""
    lines = output.splitlines()
    # "error" as a word, but not as a file name: ninja's progress lines name harness/error.cc.
    keep = [i for i, line in enumerate(lines) if re.search(r"\berror\b(?!\.\w)|Error|undefined reference", line)]
    picked: list[str] = []
    seen = set()
    for i in keep:
        for j in range(max(0, i - 1), min(len(lines), i + 4)):
            if j not in seen:
                seen.add(j)
                picked.append(lines[j])
    text = "\n".join(picked) or output[-limit:]
    return text[:limit]


SYSTEM_PREFIXES = ("/usr/", "/opt/")  # compiler, MPI, GTest, CUDA; /opt/deps on the GPU host


def foreign_includes(lab: Lab, tree: Path, build_dir: Path) -> list[str]:
    """Files the submission's sources pulled in that a submission may not use.

    Only the copy step decides which *files* are the student's, but an #include
    can reach any file the compiler can open: the reference's solution in the
    pristine tree or in this repository, hidden tests, another student's folder.
    The compiler's own dependency lists (ninja -t deps) say what every object of
    the student library really read; anything outside the lab's src/ and
    include/, the harness, datasets/ and the system folders is refused."""
    # ninja's own output (not the submission's), read whole: run_capped would cut it.
    deps = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                          errors="replace", timeout=120).stdout
    allowed = [tree / "harness", tree / "datasets", tree / "labs" / lab.name / "include",
               tree / "labs" / lab.name / "src", tree / "labs" / lab.name / "given"] + [tree / "labs" / d / "include" for d in lab.depends]
    student_obj = f"CMakeFiles/dtl_lab{lab.number}_student.dir/"
    foreign, checking = [], False
    for line in deps.splitlines():
        if not line.startswith((" ", "\t")):
            checking = student_obj in line
            continue
        path = line.strip()
        if not checking or not path:
            continue
        real = Path(os.path.realpath(path if os.path.isabs(path) else build_dir / path))
        inside = any(real.is_relative_to(a.resolve()) for a in allowed)
        system = str(real).startswith(SYSTEM_PREFIXES) and not real.is_relative_to(ROOT)
        if not inside and not system and str(real) not in foreign:
            foreign.append(str(real))
    return foreign


def build(lab: Lab, tree: Path, build_dir: Path, binaries: list[str]) -> RunResult:
    env = dict(os.environ, CCACHE_BASEDIR=str(tree), CCACHE_NOHASHDIR="true")
    cuda = "ON" if lab.needs_cuda else "OFF"
    configure = ["cmake", "-S", str(tree), "-B", str(build_dir), "-G", "Ninja", f"-DDTL_LABS={lab.number}",
                 f"-DDTL_ENABLE_CUDA={cuda}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                 f"-DDTL_HIDDEN_DIR={tree / 'grader' / 'hidden'}"]
    result = run_capped(configure, env, tree, BUILD_TIMEOUT)
    if result.returncode != 0:
        return result
    jobs = str(max(1, os.cpu_count() or 1))
    made = run_capped(["cmake", "--build", str(build_dir), "-j", jobs, "--target", *binaries], env, tree,
                      BUILD_TIMEOUT)
    made.seconds += result.seconds
    return made


# ---------------------------------------------------------------------------
# Running the tests of one binary at one rank count
# ---------------------------------------------------------------------------

@dataclass
class TestResult:
    status: str          # passed, failed, skipped, timeout, crashed, flood, not_run
    message: str = ""
    seconds: float = 0.0


def read_progress(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
    return events


def read_gtest_json(path: Path) -> dict[str, TestResult]:
    results = {}
    data = json.loads(path.read_text())
    for suite in data.get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = f"{suite['name']}.{test['name']}"
            failures = "\n".join(f.get("failure", "") for f in test.get("failures", []))
            if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                status = "skipped"
            else:
                status = "failed" if failures else "passed"
            seconds = float(str(test.get("time", "0s")).rstrip("s") or 0)
            results[name] = TestResult(status, failures, seconds)
    return results


def trace_report(trace_dir: Path, np: int) -> str:
    """Where each rank is, from the tracer's state files (grader-side timeout)."""
    lines = []
    now = time.time()
    for r in range(np):
        state = {}
        f = trace_dir / f"rank{r}.state"
        if f.exists():
            for line in f.read_text(errors="replace").replace("\0", "").splitlines():
                key, _, value = line.partition(" ")
                state[key] = value
        if state.get("state") in ("blocked", "polling"):
            since = float(state.get("since", now))
            lines.append(f"  rank {r}: in {state.get('call', '?')} for {now - since:.1f} s")
        elif state.get("state") == "running":
            lines.append(f"  rank {r}: running its own code, not in an MPI call (last call: {state.get('last', '-')})")
        else:
            lines.append(f"  rank {r}: no trace")
    return "\n".join(lines)


def list_tests(binary: Path, patterns: list[str], work: Path) -> tuple[list[str], str]:
    """The test names in `binary`, and the listing's output (shown when there are none:
    a submission can crash the program before main, e.g. in a static initializer)."""
    env = dict(os.environ, **MPI_ENV)
    result = run_capped(["mpirun", "-n", "1", str(binary), "--gtest_list_tests",
                         f"--gtest_filter={':'.join(patterns)}"], env, work, 120)
    names, suite = [], ""
    for line in result.output.splitlines():
        if not line.strip() or line.startswith(("[", "Note:", "Running main")):
            continue
        # Typed and parameterized tests carry "  # TypeParam = ..." comments.
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names, result.output


def run_tests(binary: Path, np: int, names: list[str], timeouts: dict[str, float], work: Path,
              log) -> dict[str, TestResult]:
    """Runs `names` at `np` ranks, each with its own timeout (the test main's
    watchdog), resuming after a crash, a timeout or a flood, until every test
    has a result."""
    default = min(timeouts[n] for n in names) if names else 10.0
    overrides = ",".join(f"{n}={timeouts[n]:g}" for n in names if timeouts[n] != default)
    results: dict[str, TestResult] = {}
    remaining = list(names)
    attempt = 0
    while remaining:
        attempt += 1
        run_dir = Path(tempfile.mkdtemp(prefix=f"np{np}-", dir=work))
        trace_dir = run_dir / "trace"
        trace_dir.mkdir()
        progress = run_dir / "progress.jsonl"
        out_json = run_dir / "gtest.json"
        env = dict(os.environ, **MPI_ENV, DTL_PROGRESS_FILE=str(progress), DTL_TRACE_DIR=str(trace_dir),
                   DTL_TEST_TIMEOUT=f"{default:g}", DTL_TEST_TIMEOUTS=overrides, GTEST_COLOR="no")
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(np), str(binary),
               f"--gtest_filter={':'.join(remaining)}", f"--gtest_output=json:{out_json}"]
        limit = sum(timeouts[n] for n in remaining) + 60
        report = {}
        run = run_capped(cmd, env, run_dir, limit,
                         on_timeout=lambda: report.update(text=trace_report(trace_dir, np)))
        log(run.output)
        events = read_progress(progress)
        finished = {}
        if out_json.exists() and not (run.timed_out or run.flooded):
            try:
                finished = read_gtest_json(out_json)
            except (json.JSONDecodeError, KeyError, ValueError):
                finished = {}
        for e in events:  # results of a run that ended before gtest wrote its JSON
            if e.get("event") == "end" and e["test"] not in finished:
                finished[e["test"]] = TestResult(e.get("status", "failed"), e.get("failures", ""),
                                                 float(e.get("seconds", 0)))
        started = [e["test"] for e in events if e.get("event") == "start"]
        culprit = next((t for t in reversed(started) if t not in finished), None)
        if culprit is not None:
            timeout_event = next((e for e in events if e.get("event") == "timeout" and e["test"] == culprit), None)
            tail = run.output[-2500:]
            if timeout_event is not None:
                finished[culprit] = TestResult("timeout", timeout_event["report"], timeouts[culprit])
            elif run.flooded:
                finished[culprit] = TestResult(
                    "flood", f"{culprit} printed more than {OUTPUT_FLOOD_BYTES >> 20} MiB of output; "
                             f"the run was stopped. The end of it:\n{tail}")
            elif run.timed_out:
                finished[culprit] = TestResult(
                    "timeout", f"TIMEOUT in {culprit}: the run was killed by the grader after "
                               f"{limit:.0f} s. Where each rank was:\n{report.get('text', '')}")
            else:
                finished[culprit] = TestResult(
                    "crashed", f"{culprit} crashed (mpirun exit code {run.returncode}): a rank died, "
                               f"e.g. a segmentation fault or an abort. The end of the output:\n{tail}")
        for name in remaining:
            if name in finished:
                results[name] = finished[name]
        progress_made = [n for n in remaining if n in finished]
        remaining = [n for n in remaining if n not in finished]
        if remaining and not progress_made:
            # The binary died before any test started (e.g. in a static initializer).
            for name in remaining:
                results[name] = TestResult("crashed", "the test program ended before this test started "
                                                      f"(exit code {run.returncode}):\n{run.output[-2500:]}")
            break
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


# ---------------------------------------------------------------------------
# Scoring and reporting
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# Performance items: the submission's benchmark beside the reference's
# ---------------------------------------------------------------------------

def bench_value(binary: Path, item: PerfItem, work: Path, log) -> tuple[float | None, str]:
    """One run of one benchmark row; returns (the counter's value, or None, and why not)."""
    out = Path(tempfile.mkstemp(prefix="bench-", suffix=".json", dir=work)[1])
    env = dict(os.environ, **MPI_ENV)
    row = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", item.bench)  # POSIX regex: no "\ " escapes
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(item.ranks), str(binary),
           f"--benchmark_filter=^{row}(/|$)", f"--benchmark_out={out}", "--benchmark_out_format=json",
           "--dtl_quick"]  # fewer iterations per run; the grader repeats the runs instead
    run = run_capped(cmd, env, work, 120)
    log(run.output)
    try:
        rows = json.loads(out.read_text()).get("benchmarks", [])
    except (OSError, json.JSONDecodeError):
        rows = []
    out.unlink(missing_ok=True)
    for r in rows:
        if r.get("error_occurred"):
            return None, f"{item.bench}: {r.get('error_message', 'error')}"
        if item.counter in r:
            return float(r[item.counter]), ""
    why = "timed out" if run.timed_out else f"exit code {run.returncode}"
    return None, f"{item.bench}: no result ({why}); the end of the output:\n{run.output[-1500:]}"


def score_perf(item: PerfItem, student: Path, reference: Path, work: Path, log) -> tuple[float, str, str]:
    ratios, lines = [], []
    for i in range(item.runs):
        order = [("submission", student), ("reference", reference)]
        if i % 2:
            order.reverse()
        got = {}
        for who, binary in order:
            value, why = bench_value(binary, item, work, log)
            if value is None and who == "reference":
                return 0.0, "not gradable", (f"the reference's benchmark did not give a result, so there is "
                                             f"nothing to compare with; left out of the total: {why}")
            if value is None:
                return 0.0, "failed", f"the submission's benchmark did not give a result: {why}"
            got[who] = value
        ratios.append(got["submission"] / got["reference"] if got["reference"] > 0 else float("inf"))
        lines.append(f"  pair {i + 1}: submission {got['submission']:.2f}, reference {got['reference']:.2f} "
                     f"({item.counter}), ratio {ratios[-1]:.2f}")
    ratio = sorted(ratios)[len(ratios) // 2]
    share = min(1.0, max(0.0, (item.zero_at - ratio) / (item.zero_at - item.full_at)))
    score = round(item.points * share, 2)
    summary = (f"{item.bench}: submission/reference = {ratio:.2f} (median of {item.runs} paired runs at "
               f"{item.ranks} ranks; full points at <= {item.full_at:g}, none at >= {item.zero_at:g})\n"
               + "\n".join(lines))
    return score, "passed" if share == 1.0 else "failed", summary


def gpu_available() -> bool:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        return out.returncode == 0 and "GPU" in out.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def score_item(item: Item, by_run: dict[tuple[str, int], dict[str, TestResult]],
               names: dict[str, list[str]], listing: dict[str, str]) -> tuple[float, str, str]:
    """Returns (score, status, output) for one rubric item: all or nothing."""
    if not names[item.binary]:
        return 0.0, "failed", ("the test program did not start (it lists no tests); its output:\n" +
                               listing[item.binary][-2500:])
    matched = [n for n in names[item.binary] if any(fnmatchcase(n, p) for p in item.tests)]
    if not matched:
        return 0.0, "failed", "no test matches " + ", ".join(item.tests) + " (a grader set-up problem)"
    problems = []
    for np in sorted(item.ranks, key=lambda n: (n == 1, n)):  # the order they ran in
        for name in matched:
            result = by_run.get((item.binary, np), {}).get(name, TestResult("not_run", "not run"))
            if result.status != "passed":
                label = {"skipped": "SKIPPED", "timeout": "TIMEOUT", "crashed": "CRASHED", "flood": "OUTPUT FLOOD",
                         "not_run": "NOT RUN"}.get(result.status, "FAILED")
                problems.append(f"{label} {name} at {np} rank(s):\n{result.message.strip()}")
    if not problems:
        return item.points, "passed", f"passed at {', '.join(map(str, item.ranks))} rank(s)"
    text = "\n\n".join(problems)
    if len(text) > TEST_OUTPUT_CAP:
        suffix = f"\n... ({len(problems)} problems in all; output cut)"
        text = text[:TEST_OUTPUT_CAP - len(suffix)] + suffix
    return 0.0, "failed", text


def not_gradable_row(item: Item) -> dict:
    """The row of a GPU item on a machine without a GPU: its points leave the total."""
    return dict(name=item.name, ranks=",".join(map(str, item.ranks)), score=0.0,
                max_score=0.0, status="not gradable without a GPU", visibility=item.visibility,
                output=f"not gradable without a GPU: this item's {item.points:g} points "
                       "are left out of the total, not given as 0 or as full marks")


def test_entry(row: dict) -> dict:
    """One Gradescope test. An item not gradable here (a GPU item without a GPU) has no
    status, so Gradescope shows it as neither passed nor failed, with the reason."""
    entry = {"name": row["name"], "score": row["score"], "max_score": row["max_score"],
             "output": row["output"], "visibility": row["visibility"]}
    if row["status"] in ("passed", "failed"):
        entry["status"] = row["status"]
    return entry


def print_table(lab: Lab, rows: list[dict], total: float, max_total: float, out) -> None:
    width = max([len(r["name"]) for r in rows] + [20])
    print(f"\nLab {lab.number} — {lab.title}", file=out)
    print(f"{'item':<{width}}  {'ranks':<10} {'points':>11}  status", file=out)
    for r in rows:
        pts = f"{r['score']:g} / {r['max_score']:g}"
        print(f"{r['name']:<{width}}  {r['ranks']:<10} {pts:>11}  {r['status']}", file=out)
    print(f"{'TOTAL':<{width}}  {'':<10} {f'{total:g} / {max_total:g}':>11}", file=out)


def grade_one(lab: Lab, source: Path, description: str, hidden_dirs: list[Path], args) -> dict:
    """Grades one submission (the lab's src files in `source`); prints the table and
    returns Gradescope's results as a dict. A submission can only lower its score:
    whatever it does, this returns."""
    started = time.monotonic()
    print(f"Grading lab {lab.number} ({lab.name}): {description}", flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"dtl-grade-{lab.number}-"))
    log_lines: list[str] = []

    def log(text: str) -> None:
        log_lines.append(text)
        if args.verbose:
            print(text)

    try:
        tree = work / "tree"
        tree.mkdir()
        copy_pristine_tree(lab, tree, hidden_dirs)
        # A flat upload may hold a dependency lab's files beside the lab's: not "ignored".
        notes = install_submission(lab, source, tree / "labs" / lab.name / "src",
                                   also_used={n for d in lab.depends for n in src_names_of(d)})
        notes += install_dependencies(lab, source, tree, args)
        for note in notes:
            print(f"  note: {note}")
        has_hidden = any((tree / "grader" / "hidden" / lab.name).glob("*_test.cc"))
        gpu = gpu_available()
        binaries = binaries_for(lab, has_hidden, gpu)
        # GPU items stay without a GPU: they are listed as not gradable (below).
        items = [i for i in lab.items if i.binary in binaries or (i.gpu and not gpu)]
        # Performance items need the reference's benchmark beside the submission's:
        # not gradable in a repository without reference/ (a student's export).
        has_reference = (tree / "reference" / lab.name / "src").is_dir()
        targets = list(binaries.values())
        if lab.perf and has_reference:
            targets += [f"lab{lab.number}_student_bench", f"lab{lab.number}_bench"]

        print("  building ...", flush=True)
        made = build(lab, tree, work / "build", targets)
        rows, by_run = [], {}
        foreign = foreign_includes(lab, tree, work / "build") if made.returncode == 0 else []
        if made.returncode != 0 or foreign:
            if foreign:
                why = "the submission includes files it may not use"
                errors = ("only the lab's src/ and include/, harness/, datasets/ and system headers may be "
                          "included; these are not:\n  " + "\n  ".join(foreign[:10]))
            else:
                why = "the build timed out" if made.timed_out else "the submission does not compile"
                errors = compiler_errors(made.output)
            print(f"  {why}; every item scores 0. {'The compiler said' if not foreign else 'Details'}:\n{errors}")
            for item in items + lab.perf:
                ranks = ",".join(map(str, item.ranks)) if isinstance(item, Item) else str(item.ranks)
                if isinstance(item, Item) and item.gpu and not gpu:
                    rows.append(not_gradable_row(item))
                    continue
                rows.append(dict(name=item.name, ranks=ranks, score=0.0,
                                 max_score=item.points, status="failed", visibility=item.visibility,
                                 output=f"{why}:\n{errors}"[:TEST_OUTPUT_CAP]))
        else:
            print(f"  built in {made.seconds:.0f} s; running tests ...", flush=True)
            exe_dir = work / "build" / "labs" / lab.name
            listed = {kind: list_tests(exe_dir / exe, ["*"], work) for kind, exe in binaries.items()}
            names = {kind: found for kind, (found, _) in listed.items()}
            listing = {kind: output for kind, (_, output) in listed.items()}
            # (binary, ranks) -> {test: its timeout, the largest of the items naming it}
            plan: dict[tuple[str, int], dict[str, float]] = {}
            for item in items:
                if item.gpu and not gpu:
                    continue
                matched = {n for n in names[item.binary] if any(fnmatchcase(n, p) for p in item.tests)}
                for np in item.ranks:
                    group = plan.setdefault((item.binary, np), {})
                    for n in matched:
                        group[n] = max(group.get(n, 0.0), item.timeout)
            hung: dict[tuple[str, str], tuple[int, str]] = {}  # (binary, test) -> (ranks, status)
            # Several ranks before one: a hang is first met (and reported, with every
            # rank's blocked call) where it is most instructive, and not re-run after.
            for (kind, np), tests in sorted(plan.items(), key=lambda kv: (kv[0][0], kv[0][1] == 1, kv[0][1])):
                # A test that hung or flooded at fewer ranks is not run again: it fails
                # its item anyway, and each further run would cost a full timeout.
                ordered = [n for n in names[kind] if n in tests and (kind, n) not in hung]
                t0 = time.monotonic()
                by_run[(kind, np)] = run_tests(exe_dir / binaries[kind], np, ordered, tests, work, log)
                for n, r in by_run[(kind, np)].items():
                    if r.status in ("timeout", "flood"):
                        hung.setdefault((kind, n), (np, r.status))
                for n in tests:
                    if (kind, n) in hung and n not in by_run[(kind, np)]:
                        at, status = hung[(kind, n)]
                        what = "timed out" if status == "timeout" else "flooded its output"
                        by_run[(kind, np)][n] = TestResult(status, f"not run: it {what} at {at} rank(s)")
                ordered = [n for n in names[kind] if n in tests]
                bad = sum(r.status != "passed" for r in by_run[(kind, np)].values())
                print(f"  {kind:<6} at {np} rank(s): {len(ordered) - bad}/{len(ordered)} passed "
                      f"({time.monotonic() - t0:.1f} s)", flush=True)
            for item in items:
                if item.gpu and not gpu:
                    rows.append(not_gradable_row(item))
                    continue
                score, status, output = score_item(item, by_run, names, listing)
                rows.append(dict(name=item.name, ranks=",".join(map(str, item.ranks)), score=score,
                                 max_score=item.points, status=status, visibility=item.visibility,
                                 output=output))
            passed = {r["name"] for r in rows if r["status"] == "passed"}
            for item in lab.perf:
                row = dict(name=item.name, ranks=str(item.ranks), max_score=item.points,
                           visibility=item.visibility)
                missing = [r for r in item.requires if r not in passed]
                if not has_reference:
                    row.update(score=0.0, max_score=0.0, status="not gradable without the reference",
                               output="performance points compare with reference/, which this "
                                      "repository does not have; they are left out of the total")
                elif missing:
                    row.update(score=0.0, status="failed",
                               output="speed counts only for a correct solution; first pass: " + "; ".join(missing))
                else:
                    t0 = time.monotonic()
                    score, status, output = score_perf(item, exe_dir / f"lab{lab.number}_student_bench",
                                                       exe_dir / f"lab{lab.number}_bench", work, log)
                    row.update(score=score, status=status, output=output)
                    if status == "not gradable":
                        row["max_score"] = 0.0
                    print(f"  perf   {item.bench} at {item.ranks} rank(s): {score:g}/{item.points:g} "
                          f"({time.monotonic() - t0:.1f} s)", flush=True)
                rows.append(row)
        total = round(sum(r["score"] for r in rows), 2)
        max_total = round(sum(r["max_score"] for r in rows), 2)
        print_table(lab, rows, total, max_total, sys.stdout)
        failed = [r for r in rows if r["status"] == "failed"]
        if failed:
            print("\nWhat went wrong (first problem of each item):")
            for r in failed:
                first = r["output"].split("\n\n")[0]
                print(f"--- {r['name']}\n{first[:1500]}")
        elapsed = time.monotonic() - started
        print(f"graded in {elapsed:.0f} s", flush=True)
        return {
            "score": total, "max_score": max_total, "execution_time": round(elapsed, 1),
            "output": f"Lab {lab.number} ({lab.title}): {total:g} / {max_total:g}. " + " ".join(notes),
            "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [test_entry(r) for r in rows],
        }
    finally:
        if args.keep:
            (work / "run.log").write_text("\n".join(log_lines))
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def grade_batch(lab: Lab, folder: Path, out: Path, hidden_dirs: list[Path], args) -> int:
    """Grades every sub-folder of `folder` (a submission each, named by the folder),
    one after the other; writes out/NAME.json and out/summary.csv."""
    if not folder.is_dir():
        raise GraderError(f"--batch {folder}: not a folder")
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not submissions:
        raise GraderError(f"--batch {folder}: no sub-folders (one per submission) in it")
    out.mkdir(parents=True, exist_ok=True)
    summary = ["submission,score,max_score,seconds"]
    for sub in submissions:
        args.submission = str(sub)
        source, description = submission_sources(lab, args)
        results = grade_one(lab, source, description, hidden_dirs, args)
        (out / f"{sub.name}.json").write_text(json.dumps(results, indent=2) + "\n")
        summary.append(f"{sub.name},{results['score']:g},{results['max_score']:g},{results['execution_time']:g}")
    (out / "summary.csv").write_text("\n".join(summary) + "\n")
    print(f"\ngraded {len(submissions)} submissions; results in {out}/ (summary.csv, NAME.json)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dtl grade", description="Grade a lab: build the submission in a pristine tree, run the tests "
                                        "under MPI with timeouts, score the rubric, write Gradescope JSON.")
    parser.add_argument("lab", help="lab number, e.g. 01")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--submission", metavar="DIR",
                       help="a folder with the lab's src files, or a checkout of the repository "
                            "(default: your own labs/NN_topic/src)")
    which.add_argument("--reference", action="store_true", help="grade the reference solution")
    which.add_argument("--skeleton", action="store_true", help="grade the untouched student skeleton")
    which.add_argument("--batch", metavar="DIR",
                       help="grade every folder in DIR as one submission (instructors); writes "
                            "OUT/NAME.json and OUT/summary.csv, OUT given by --out")
    parser.add_argument("--json", metavar="FILE", help="write Gradescope results.json here")
    parser.add_argument("--out", metavar="DIR", default="grades", help="with --batch: where results go "
                                                                      "(default: ./grades)")
    parser.add_argument("--hidden", metavar="DIR", action="append", default=[],
                        help="more hidden tests: a folder of *_test.cc files and a rubric.toml (repeatable)")
    parser.add_argument("--no-hidden", action="store_true", help="skip the example hidden tests in grader/hidden")
    parser.add_argument("--keep", action="store_true", help="keep the pristine build folder and print its path")
    parser.add_argument("--verbose", action="store_true", help="print every test run's output")
    args = parser.parse_args(argv)

    try:
        lab_name = find_lab(args.lab)
        hidden_dirs = [] if args.no_hidden else [ROOT / "grader" / "hidden" / lab_name]
        hidden_dirs = [d for d in hidden_dirs if d.is_dir()] + [Path(h).resolve() for h in args.hidden]
        for d in hidden_dirs:
            if not d.is_dir():
                raise GraderError(f"--hidden {d}: not a folder")
        lab = load_lab(args.lab, hidden_dirs)
        if args.batch:
            return grade_batch(lab, Path(args.batch), Path(args.out), hidden_dirs, args)
        source, description = submission_sources(lab, args)
    except GraderError as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    results = grade_one(lab, source, description, hidden_dirs, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
