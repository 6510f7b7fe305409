"""The course's own objects, built once and kept: a submission compiles only its files.

course_key() hashes what goes into the course's objects; ensure() builds them
once per key into the cache (a lock keeps two gradings from building the same
entry at once) and checks a kept entry before each use; prepare() turns a
grading's empty build folder into one that compiles only the student's objects
and links them with the kept ones. See Note [Prebuilt course objects].
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .lab import GraderError, Lab, skeleton_src

# Bump when what an entry holds, or how it is made, changes: older entries are then unused.
FORMAT = 2
READY = "ready.json"               # written last, once the entry is built and checked
UNUSED_DAYS = 7                    # an entry unused this long is removed (a grading lasts minutes)
KEEP_PER_LAB = 3                   # beyond a lab's most recently used entries, an entry...
IDLE_HOURS = 1                     # ...unused this long is removed too (entries are 0.1-0.3 GB)

# Note [Prebuilt course objects]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A grading used to configure and build a fresh pristine tree: the harness, the
# training core, the tests, the hidden tests and the reference, all course code,
# rebuilt (or fetched from ccache) for every submission. Now the course's
# objects are built once per *entry* of a cache (DTL_PREBUILT_DIR, default
# ~/.cache/dtlabs/prebuilt): the pristine tree with the skeleton, configured and
# built exactly as a grading would, the targets it needs and nothing else. An
# entry is named by a hash (course_key()) of every file of the pristine tree but
# the student's src/ folders (hidden tests included), the skeleton's files, the
# targets, the CMake options and the tool versions, so a changed harness file or
# hidden test names a new entry: a grading never links old course code.
#
# Why this design, and not CMake importing prebuilt libraries: the build graph
# stays CMake's own. The grading's build folder gets the entry's build.ninja
# reduced to the edges that depend on the student's code (the student libraries'
# objects -- src/ and the given/ files compiled against src/ headers -- and
# every library and program that links them; found from the graph, plus any
# other object whose recorded dependencies read a src/ file), with the entry's
# paths replaced by the grading's. Every other input of those edges (harness
# libraries, test and hidden-test objects) is a symbolic link into the entry;
# the reference's programs are copied. So ninja compiles only the student's
# files, and everything the checks read (ninja -t deps, ninja -t compdb, the
# objects under CMakeFiles/dtl_labNN_student.dir) is where it always was. The
# CMake files, harness and tests need no second way of building.
#
# Kept honest: ensure() records, for each entry, the size and time of every file
# a grading links from it and of every system file its objects were compiled
# from (headers, libraries), and checks them before each use; a difference
# rebuilds the entry. Hidden tests' objects and the programs made from them are
# stripped of debug information in the entry, and checked to have none: a
# submission links them but never reads their source paths or line tables. The
# build's sandbox sees the entry's build folder read-only (for the links), never
# its tree (reference/ and the hidden tests' sources); the runs see none of it.
# Two gradings that need the same new entry: one builds it under the entry's
# lock (fcntl), the other waits and then uses it.

# Note [Seeded by the repository's build]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An entry compiles the lab's tests, hidden tests and reference: 60-120 s a lab
# on 2 cores, paid nine times over on a fresh machine (CI, a new grader image),
# although `./dtl build` compiled the same files from the same sources already.
# ccache can hand those objects over when the compiler's command lines are the
# same once CCACHE_BASEDIR has made the paths relative: so an entry lays its
# build folder out as the repository does (tree/build, as ROOT/build), `./dtl`
# builds with CCACHE_BASEDIR=ROOT (build.py: the entry's with its tree), and a
# grading configures CUDA as the repository's build does, wherever nvcc is
# (build.cuda_wanted()): the build then differs only in which labs it selects.
# Measured in the README's instructor section ("The suite").


def cache_root() -> Path:
    """Where entries live: $DTL_PREBUILT_DIR, else $XDG_CACHE_HOME/dtlabs/prebuilt."""
    if os.environ.get("DTL_PREBUILT_DIR"):
        return Path(os.environ["DTL_PREBUILT_DIR"]).resolve()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return (base / "dtlabs" / "prebuilt").resolve()


def _tool_versions(cuda: bool) -> str:
    tools = [["c++", "--version"], ["cmake", "--version"], ["ninja", "--version"], ["mpicxx", "--showme"]]
    if cuda:
        tools.append(["/usr/local/cuda/bin/nvcc", "--version"])
    out = []
    for cmd in tools:
        try:
            out.append(subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout)
        except (OSError, subprocess.TimeoutExpired):
            out.append(f"{cmd[0]}: none")
    return "\n".join(out)


def student_src_dirs(lab: Lab) -> list[str]:
    """The folders of a tree that hold submitted files: labs/NN/src of the lab and the labs it links."""
    return [f"labs/{each.name}/src" for each in lab.with_dependencies]


def course_key(lab: Lab, tree: Path, configure_args: list[str], targets: list[str]) -> str:
    """The hash that names the entry for `tree` (a pristine tree, with or without a
    submission's files: its src/ folders do not count, the skeleton's files do)."""
    h = hashlib.sha256(f"dtlabs prebuilt {FORMAT}\n".encode())
    h.update("\n".join([*configure_args, *sorted(targets), _tool_versions("-DDTL_ENABLE_CUDA=ON" in configure_args)]).encode())
    skip = student_src_dirs(lab)
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree).as_posix()
        if path.is_file() and not any(rel.startswith(s + "/") for s in skip):
            h.update(f"\0{rel}\0{path.stat().st_size}\0".encode())
            h.update(path.read_bytes())
    for name in (each.name for each in lab.with_dependencies):
        for path in sorted(skeleton_src(name).rglob("*")):
            if path.is_file():
                h.update(f"\0skeleton/{name}/{path.relative_to(skeleton_src(name))}\0".encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------
# The build graph (CMake's build.ninja)
# ---------------------------------------------------------------------------

_TOKEN = re.compile(r"(?:\$.|[^\s$])+")


@dataclass
class Edge:
    """One `build` statement: its outputs, rule, inputs and variable lines."""
    outputs: list[str]
    rule: str
    explicit: list[str]
    implicit: list[str]
    lines: list[str] = field(default_factory=list)  # the indented `VAR = value` lines

    def text(self) -> str:
        """The statement without its order-only inputs (CMake's ordering phonies)."""
        ins = " ".join(self.explicit) + (" | " + " ".join(self.implicit) if self.implicit else "")
        return f"build {' '.join(self.outputs)}: {self.rule} {ins}".rstrip() + "\n" + "".join(self.lines)


def parse_edges(text: str) -> list[Edge]:
    """The build statements of a ninja file as CMake writes it (one line each,
    then indented variables)."""
    edges: list[Edge] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("build "):
            head = line[len("build "):].rstrip("\n")
            colon = re.search(r"(?<!\$):", head)
            outs = [t for t in _TOKEN.findall(head[:colon.start()]) if t != "|"]
            rest = _TOKEN.findall(head[colon.end():])
            rule, parts, kind = rest[0], {"": [], "|": [], "||": []}, ""
            for token in rest[1:]:
                if token in ("|", "||", "|@"):
                    kind = "||" if token != "|" else "|"
                    continue
                parts[kind].append(token)
            edges.append(Edge(outs, rule, parts[""], parts["|"]))
        elif line.startswith("  ") and edges:
            edges[-1].lines.append(line)
    return edges


def _unescape(path: str) -> str:
    return re.sub(r"\$(.)", r"\1", path)


def student_edges(edges: list[Edge], lab: Lab, reads_src: set[str], wanted: list[str]) -> list[Edge]:
    """The edges a grading's build runs for the targets `wanted`: those that depend
    on the student's code (the student libraries' objects, the objects in
    `reads_src`, and whatever is made from them), as far as `wanted` needs them."""
    markers = [f"/CMakeFiles/dtl_lab{each.number}_student.dir/" for each in lab.with_dependencies]
    student: set[str] = set(reads_src)
    for e in edges:
        if any(m in "/" + o for o in e.outputs for m in markers):
            student.update(e.outputs)
    grew = True
    while grew:
        grew = False
        for e in edges:
            if not student.issuperset(e.outputs) and any(i in student for i in e.explicit + e.implicit):
                student.update(e.outputs)
                grew = True
    by_output = {o: e for e in edges for o in e.outputs}
    keep, todo, seen = [], [t for t in wanted if t in student], set()
    while todo:
        edge = by_output[todo.pop()]
        if id(edge) in seen:
            continue
        seen.add(id(edge))
        keep.append(edge)
        todo += [i for i in edge.explicit + edge.implicit if i in student and i in by_output]
    return keep


def _recorded_deps(build_dir: Path) -> dict[str, list[str]]:
    """ninja's dependency log of `build_dir`: object -> files it read."""
    out = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                         errors="replace", timeout=300).stdout
    deps: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith((" ", "\t")):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif current is not None and line.strip():
            deps[current].append(line.strip())
    return deps


# ---------------------------------------------------------------------------
# Entries of the cache
# ---------------------------------------------------------------------------

@dataclass
class Entry:
    """A built entry: its folder (tree/, with build/ inside it) and what ready.json says."""
    folder: Path
    info: dict

    @property
    def tree(self) -> Path:
        return self.folder / "tree"

    @property
    def build(self) -> Path:
        return self.tree / "build"  # where build/ is in the repository: Note [Seeded by the repository's build]


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _verified(folder: Path) -> Entry | None:
    """The entry in `folder` if it is complete and nothing it records has changed."""
    try:
        info = json.loads((folder / READY).read_text())
        for path, stamp in info["files"].items():
            if _stamp(Path(path)) != stamp:
                return None
    except (OSError, ValueError, KeyError):
        return None
    return Entry(folder, info)


def ensure(lab: Lab, key: str, make_tree, key_of, build_course, targets: list[str], log=print) -> Entry:
    """The entry named `key`, built first if it is missing or changed: make_tree(dest)
    writes the pristine tree with the skeleton, key_of(tree) is course_key() for
    it, build_course(tree, build_dir, targets) configures and builds it as a
    grading would (build.build_tree()). Raises GraderError when the course itself
    does not build (a hidden test that does not compile)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"{lab.number}-{key}"
    entry = _verified(folder)
    if entry is None:
        with open(root / f"{folder.name}.lock", "w") as lock:
            waiting = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)  # a grading building this entry: wait for it
            waited = time.monotonic() - waiting
            entry = _verified(folder)
            if entry is not None and waited >= 1:
                log(f"  course objects built by another grading; waited {waited:.0f} s for them")
            if entry is None:
                log(f"  building the course's objects for lab {lab.number} (once; kept in {root}) ...")
                start = time.monotonic()
                entry = _build_entry(lab, key, folder, make_tree, key_of, build_course, targets)
                log(f"  course objects built in {time.monotonic() - start:.0f} s")
    os.utime(folder / READY)  # used now: not pruned
    _prune(root)
    return entry


def _build_entry(lab: Lab, key: str, folder: Path, make_tree, key_of, build_course, targets: list[str]) -> Entry:
    shutil.rmtree(folder, ignore_errors=True)
    tree = folder / "tree"
    build_dir = tree / "build"
    tree.mkdir(parents=True)
    make_tree(tree)
    if key_of(tree) != key:
        shutil.rmtree(folder, ignore_errors=True)
        raise GraderError("the course's files changed during the grading (the pristine tree and the entry's "
                          "differ): grade again")
    made = build_course(tree, build_dir, targets)
    if made.returncode != 0:
        raise GraderError(f"the course's own code does not build for lab {lab.number} (a hidden test, the "
                          f"harness or the skeleton), so nothing can be graded:\n{made.output[-4000:]}")
    strip_hidden(build_dir, lab)
    deps = _recorded_deps(build_dir)
    src = [str(tree / s) + "/" for s in student_src_dirs(lab)]
    reads_src = sorted(obj for obj, files in deps.items() if any(f.startswith(tuple(src)) for f in files))
    # What a grading relies on: the entry's outputs it links or copies, the system files compiled in.
    edges = parse_edges((build_dir / "build.ninja").read_text())
    keep = student_edges(edges, lab, set(reads_src), targets)
    made_here = {o for e in keep for o in e.outputs}
    used = {_unescape(i) for e in keep for i in e.explicit + e.implicit if i not in made_here}
    used |= {f for files in deps.values() for f in files if os.path.isabs(f) and not f.startswith(str(folder))}
    files = {}
    for path in sorted(used):
        full = Path(path) if os.path.isabs(path) else build_dir / path
        if full.is_file():
            files[str(full)] = _stamp(full)
    for target in targets:
        for program in (build_dir / "labs").glob(f"*/{target}"):
            files[str(program)] = _stamp(program)
    info = {"key": key, "lab": lab.number, "targets": targets, "reads_src": reads_src, "files": files,
            "built": time.strftime("%Y-%m-%d %H:%M:%S")}
    tmp = folder / (READY + ".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.rename(folder / READY)
    return Entry(folder, info)


def strip_hidden(build_dir: Path, lab: Lab) -> None:
    """Drops the debug information (source paths, line tables, local names) from
    the hidden tests' objects and programs in an entry, and checks that none is left."""
    hidden = [p for p in (build_dir / "labs" / lab.name).rglob("*")
              if p.is_file() and (f"lab{lab.number}_student_hidden" in p.as_posix()
                                  or f"lab{lab.number}_reference_hidden" in p.as_posix())
              and (p.suffix == ".o" or os.access(p, os.X_OK))]
    for path in hidden:
        subprocess.run(["strip", "--strip-debug", str(path)], capture_output=True, timeout=120)
        if has_debug_info(path):
            raise GraderError(f"could not strip the debug information of {path}")


def has_debug_info(path: Path) -> bool:
    """Whether an object or program has DWARF sections (.debug_*)."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, timeout=60).stdout
    return ".debug_" in out or ".zdebug_" in out


def _prune(root: Path) -> None:
    """Removes entries unused for UNUSED_DAYS, and, beyond each lab's KEEP_PER_LAB
    most recently used, those unused for IDLE_HOURS (and their locks). A course
    being edited makes a new entry per change and lab: without the second rule
    a day of edits kept tens of gigabytes. An entry in use was used (ready.json
    touched) when its grading began, minutes ago, so it is never removed."""
    now = time.time()
    used: dict[str, list[tuple[float, Path]]] = {}
    for ready in root.glob(f"*/{READY}"):
        try:
            used.setdefault(ready.parent.name.split("-")[0], []).append((ready.stat().st_mtime, ready.parent))
        except OSError:
            continue
    for entries in used.values():
        entries.sort(reverse=True)  # most recently used first
        for rank, (mtime, folder) in enumerate(entries):
            idle = now - mtime
            if idle > UNUSED_DAYS * 86400 or (rank >= KEEP_PER_LAB and idle > IDLE_HOURS * 3600):
                shutil.rmtree(folder, ignore_errors=True)
                (root / f"{folder.name}.lock").unlink(missing_ok=True)


# ---------------------------------------------------------------------------
# A grading's build folder
# ---------------------------------------------------------------------------

def prepare(entry: Entry, lab: Lab, tree: Path, build_dir: Path, targets: list[str]) -> list[str]:
    """Fills the empty `build_dir` of the grading of `tree`: a build.ninja that
    compiles the student's files and links them with the entry's objects (symbolic
    links), and copies of the course's programs among `targets`. Returns the
    targets left for ninja to build."""
    old_tree, old_build = str(entry.tree), str(entry.build)

    def moved(text: str) -> str:  # the build folder first: it lies inside the tree
        return text.replace(old_build, str(build_dir)).replace(old_tree, str(tree))

    edges = parse_edges((entry.build / "build.ninja").read_text())
    keep = student_edges(edges, lab, set(entry.info["reads_src"]), targets)
    made_here = {o for e in keep for o in e.outputs}
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "CMakeFiles").mkdir(exist_ok=True)
    rules = (entry.build / "CMakeFiles" / "rules.ninja").read_text()
    (build_dir / "CMakeFiles" / "rules.ninja").write_text(moved(rules))
    body = "\n".join(moved(e.text()) for e in keep)
    if str(entry.folder) in body:
        raise GraderError(f"prebuilt.prepare(): the build file still names the entry {entry.folder}")
    text = (f"# Made by grader/dtlgrade/prebuilt.py from {entry.build}/build.ninja: the edges that\n"
            f"# depend on the student's files; every other input links into that entry.\n"
            f"ninja_required_version = 1.8\ninclude CMakeFiles/rules.ninja\n"
            f"cmake_ninja_workdir = {build_dir}/\n\n" + body)
    (build_dir / "build.ninja").write_text(text)
    for path in sorted({_unescape(i) for e in keep for i in e.explicit + e.implicit if i not in made_here}):
        if os.path.isabs(path):
            continue
        link = build_dir / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(entry.build / path)
    left = []
    for target in targets:
        if target in made_here:
            left.append(target)
            continue
        for program in (entry.build / "labs").glob(f"*/{target}"):  # a course program: a copy of its own
            dest = build_dir / program.relative_to(entry.build)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(program, dest)
    return left
