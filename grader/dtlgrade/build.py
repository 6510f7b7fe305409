"""Building a submission, and checking what the build read.

build() builds the targets asked for in a grading's build folder: by default
with the course's objects prebuilt (prebuilt.py: only the student's files
compile, then the links), or, with `entry` None (--no-prebuilt), by
configuring and building the whole pristine tree (build_tree(), which also
builds the prebuilt entries), with ccache keyed on the tree. compiler_errors()
picks the error lines out of a failed build's log. foreign_includes() reads the
compiler's dependency lists and names every file the student library read that
a submission may not use.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from . import prebuilt
from .lab import ROOT, Lab
from .process import RunResult, run_capped
from .runner import gpu_available

BUILD_TIMEOUT = 900                 # seconds for configure, and again for build


def nvcc_found() -> bool:
    """Whether CMake finds nvcc here (cmake/DtlOptions.cmake: /usr/local/cuda/bin/nvcc, else PATH)."""
    return os.access("/usr/local/cuda/bin/nvcc", os.X_OK) or shutil.which("nvcc") is not None


def cuda_wanted(lab: Lab) -> bool:
    """CUDA in a grading's build: wherever nvcc is, as in the repository's own build
    (so that build's objects seed the course's: Note [Seeded by the repository's
    build] in prebuilt.py), and always for a lab with CUDA code of its own (`cuda =
    true`: lab 03) or with GPU items where a GPU can run them. Without a GPU the GPU
    items are reported as not gradable, whatever the build."""
    return nvcc_found() or lab.needs_cuda or (any(i.gpu for i in lab.items) and gpu_available())


def configure_args(lab: Lab, tree: Path) -> list[str]:
    """CMake's options of a grading's build of `tree` (only the lab and the labs it links)."""
    cuda = "ON" if cuda_wanted(lab) else "OFF"
    return ["-G", "Ninja", f"-DDTL_LABS={lab.number}", f"-DDTL_ENABLE_CUDA={cuda}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            f"-DDTL_HIDDEN_DIR={tree / 'grader' / 'hidden'}"]


def _env(tree: Path) -> dict:
    return dict(os.environ, CCACHE_BASEDIR=str(tree), CCACHE_NOHASHDIR="true")


def build_tree(lab: Lab, tree: Path, build_dir: Path, binaries: list[str]) -> RunResult:
    """Configures `tree` into `build_dir` and builds the targets `binaries`; the
    result of the configure if it failed, else the build's (seconds: both)."""
    env = _env(tree)
    result = run_capped(["cmake", "-S", str(tree), "-B", str(build_dir), *configure_args(lab, tree)], env, tree,
                        BUILD_TIMEOUT)
    if result.returncode != 0:
        return result
    jobs = str(max(1, os.cpu_count() or 1))
    made = run_capped(["cmake", "--build", str(build_dir), "-j", jobs, "--target", *binaries], env, tree,
                      BUILD_TIMEOUT)
    made.seconds += result.seconds
    return made


def build(lab: Lab, tree: Path, build_dir: Path, binaries: list[str],
          entry: prebuilt.Entry | None = None) -> RunResult:
    """Builds the targets `binaries` of the grading of `tree` into `build_dir`: with
    `entry`, only what depends on the student's files (the first call fills the
    folder from the entry; a later one, after files were reverted, rebuilds what
    changed); without, the whole tree (build_tree())."""
    if entry is None:
        return build_tree(lab, tree, build_dir, binaries)
    if not (build_dir / "build.ninja").exists():
        left = prebuilt.prepare(entry, lab, tree, build_dir, binaries)
    else:
        made_here = (build_dir / "build.ninja").read_text()
        left = [b for b in binaries if f"\nbuild {b}: phony" in made_here]
    jobs = str(max(1, os.cpu_count() or 1))
    return run_capped(["ninja", "-C", str(build_dir), "-j", jobs, *left], _env(tree), tree, BUILD_TIMEOUT)


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
    the student libraries really read (the lab's and the labs it links: every
    submitted file the build compiles); anything outside those labs' src/,
    given/ and include/, the harness, datasets/ and the system folders is
    refused. `asm(".incbin ...")` reads a file without a trace in these lists:
    objects.py refuses inline assembly."""
    # ninja's own output (not the submission's), read whole: run_capped would cut it.
    deps = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                          errors="replace", timeout=120).stdout
    # Every lab whose submitted files this build compiles: the lab and the labs it links.
    labs = [each.name for each in lab.with_dependencies]
    allowed = [tree / "harness", tree / "datasets"] + [tree / "labs" / d / sub for d in labs
                                                       for sub in ("include", "src", "given")]
    student_objs = [f"CMakeFiles/dtl_lab{d[:2]}_student.dir/" for d in labs]
    foreign, checking = [], False
    for line in deps.splitlines():
        if not line.startswith((" ", "\t")):
            checking = any(o in line for o in student_objs)
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

