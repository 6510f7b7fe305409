"""The lab being graded and its rubric.

load_lab() finds labs/NN_topic, reads grader/rubrics/NN.toml and the hidden
rubrics, and returns a Lab: its rubric items (Item: gtest patterns at rank
counts, all or nothing), its speed items (PerfItem), its gradable file names
(Lab.src_names) and the labs whose library it links (Lab.dependencies, each a Lab
itself; found by dependency_labs()). binaries_for() says which test binaries a
grading builds. Nothing here builds or runs anything.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .imports import Policy

# The repository the grader belongs to: its labs, reference, rubrics and hidden tests.
ROOT = Path(__file__).resolve().parents[2]


class GraderError(Exception):
    """A problem with the grader's own set-up (bad lab number, bad rubric), never a submission's."""


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
    measured in pairs of runs (reference, submission, reference); the score follows the
    median of the per-pair ratios (full at or below full_at, none at or above
    zero_at, linear between). Scored only when the items in `requires` passed.

    The default counter, `ratio`, is each run's own time/vendor ratio (the row
    times the implementation and the vendor call back to back, in one process),
    so what the grader compares is (submission/vendor) / (reference/vendor):
    a machine that is slower during one run slows both halves of that run.

    Each pair also runs the reference twice, and a pair count between `runs` and
    `max_runs` (default 2 * runs) depends on the noise (perf.py, Note [Noise
    guard]); a clear result ends it after `early_runs` pairs (Note [Early
    stop]). The item runs at `ranks` ranks when the grader has a core for each,
    else at the largest of `ranks_allowed` (default: only `ranks`) that fits, else
    it is not gradable there (perf.fit_ranks()). A run of a `timed` item whose
    ranks waited for a CPU too long is void (perf.py, Note [Ranks kept from
    their cores])."""
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
    ranks_allowed: list[int] = field(default_factory=list)  # rank counts that measure the same thing
    max_runs: int = 0          # most pairs when the machine is noisy; 0: 2 * runs
    early_runs: int = 0        # pairs after which a clear result stops early (perf.early_verdict()); 0: runs
    timed: bool = True         # the counter is a time; false for one no scheduler can change (bytes held):
                               # then ranks kept from their cores do not void a run (perf.py, Note [Ranks
                               # kept from their cores])

    def __post_init__(self):
        self.ranks_allowed = sorted(set(self.ranks_allowed) | {self.ranks})
        self.max_runs = self.max_runs or 2 * self.runs
        self.early_runs = self.early_runs or self.runs
        if self.runs < 1 or self.max_runs < self.runs:
            raise TypeError(f"runs = {self.runs}, max_runs = {self.max_runs}: need 1 <= runs <= max_runs")
        if not 1 <= self.early_runs <= self.runs:
            raise TypeError(f"early_runs = {self.early_runs}, runs = {self.runs}: need 1 <= early_runs <= runs")
        if min(self.ranks_allowed) < 1:
            raise TypeError(f"ranks_allowed = {self.ranks_allowed}: rank counts are at least 1")
        if not 0 < self.full_at < self.zero_at:
            raise TypeError(f"full_at = {self.full_at:g}, zero_at = {self.zero_at:g}: need 0 < full_at < zero_at")


@dataclass
class Lab:
    number: str
    name: str                  # e.g. 01_point_to_point
    title: str
    items: list[Item]
    perf: list[PerfItem] = field(default_factory=list)
    needs_cuda: bool = False
    # The labs whose library this one links, and theirs in turn (dependency_labs()): lab 04
    # links lab 03's ring, so grading lab 04 builds, checks and installs lab 03's files too.
    dependencies: list[Lab] = field(default_factory=list)
    budget: float = 600.0      # seconds for all of the lab's test runs (rubric: budget)
    imports: Policy = field(default_factory=Policy)  # rubric: [[imports.allow]], [[imports.refuse]]
    # What the hidden tests are worth where they are absent: a student repository's rubric
    # says (./dtl export-student writes hidden_points from grader/hidden/NN/rubric.toml).
    hidden_points: float = 0.0

    @property
    def src_names(self) -> list[str]:
        """The gradable file names, relative to src/: those of the reference, or (in a
        repository exported to students, without reference/) those of the skeleton."""
        src = ROOT / "reference" / self.name / "src"
        if not src.is_dir():
            src = skeleton_src(self.name)
        return sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())

    @property
    def with_dependencies(self) -> list[Lab]:
        """This lab, then the labs it links: every lab whose submitted files a grading compiles."""
        return [self, *self.dependencies]


def skeleton_src(lab_name: str) -> Path:
    """The untouched skeleton of a lab. In a repository exported to students,
    labs/NN/src holds the student's work, so the export keeps a copy of the skeleton
    in grader/skeletons/NN_topic/src (grader/export_student.py) and this returns it."""
    kept = ROOT / "grader" / "skeletons" / lab_name / "src"
    return kept if kept.is_dir() else ROOT / "labs" / lab_name / "src"


def find_lab(number: str) -> str:
    number = f"{int(number):02d}" if number.isdigit() else number
    found = sorted(p.name for p in (ROOT / "labs").glob(f"{number}_*") if p.is_dir())
    if not found:
        labs = ", ".join(sorted(p.name[:2] for p in (ROOT / "labs").glob("[0-9][0-9]_*")))
        raise GraderError(f"no lab {number!r} (labs: {labs})")
    return found[0]


def dependency_labs(lab_name: str) -> list[str]:
    """The folder names (NN_topic) of the labs whose library lab `lab_name` links:
    `FLAVORED_LIBS dtl_labNN` in its CMakeLists.txt (cmake/DtlAddLab.cmake), and theirs
    in turn. Lab 04's ring backend is the student's own lab-03 ring, so grading lab 04
    builds lab 03 too, from the same submission when it holds lab 03's files
    (submission.install_dependencies()). load_lab() makes each a Lab (Lab.dependencies)."""
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


# The test binaries an item can name, and the CMake target of each (dtl_add_lab):
# tests/*_test.cc, grader/hidden/NN_topic/*_test.cc, tests/*_gpu_test.cc.
BINARY_KINDS = {"test": "lab{n}_student_test", "hidden": "lab{n}_student_hidden", "gpu": "lab{n}_student_gpu"}


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
               needs_cuda=bool(data.get("cuda", False)),
               # A dependency's own hidden tests are not graded with this lab: none are loaded.
               dependencies=[load_lab(dep[:2], []) for dep in dependency_labs(name)],
               budget=float(data.get("budget", 600)), imports=Policy.from_rubric(data),
               hidden_points=float(data.get("hidden_points", 0)))
