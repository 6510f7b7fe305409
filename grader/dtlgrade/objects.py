"""What a submission's compiled code defines and how it would start, and whether its
source holds assembly: checked after the build, before any of it runs.

The imports check (imports.py) reads what an object file needs from elsewhere.
Three more things in an object file, or in the source behind it, would let
submitted code act before the test main or in its place (See Note [Results the
grader can trust], harness/testing/result_channel.cc):

  - start-up code that runs before the test main's priority constructor: a
    prioritized constructor (.init_array.NNNNN, .ctors.NNNNN), .preinit_array,
    code in .init, or an ifunc resolver (run by the loader, before any
    constructor). A plain static initializer (.init_array) runs after it, and is
    allowed;
  - definitions that take the place of someone else's in the whole test program:
    a C function or variable (`open`, `read`, `MPI_Send`: the executable's
    definition wins over libc's and MPI's), the global operator new or delete,
    or a strong definition outside namespace dtl, or inside the harness's
    dtl::testing and dtl::trace;
  - inline assembly (`asm`, `__asm__`): raw system calls that no import names, and
    `.incbin`, which reads any file the compiler can open into the object without
    appearing in the dependency list. Looked for in the preprocessed source, in
    the lines that come from submitted files (so a macro that pastes `asm`
    together is found too); .cu files, which the host preprocessor does not take
    as they are, in their own text.

Each finding is an imports.Refusal (file, what, why), so that grading reverts the
file to the skeleton's exactly as for a refused import.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from .imports import Refusal, _namespace, student_objects
from .process import read_confined

# Sections whose code runs before the test main's priority-101 constructor.
EARLY_SECTIONS = re.compile(r"^(\.init_array\.\d+|\.ctors.*|\.preinit_array.*|\.init)$")
# C names the compilers themselves define: DWARF's personality reference, nvcc's registration.
COMPILER_C_NAMES = re.compile(r"^(DW\.ref\..*)$")
NVCC_NAMES = re.compile(r"^(__cuda|__nv|__fatbin|_Z.*__device_stub__|__sti__)")
STRONG = set("TDBRCGS")
HARNESS_INTERNALS = ("_ZN3dtl7testing", "_ZN3dtl5trace", "_ZNK3dtl7testing", "_ZNK3dtl5trace")
ASM_TOKEN = re.compile(r"\b(asm|__asm|__asm__)\b|\.incbin\b")
_LITERAL = re.compile(r'R"([^()\\ ]{0,16})\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_LINEMARKER = re.compile(r'^# (\d+) "((?:\\.|[^"\\])*)"')


def _sections(obj: Path) -> list[str]:
    out = subprocess.run(["readelf", "-SW", str(obj)], capture_output=True, text=True, timeout=60).stdout
    return re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", out, re.M)


def _definitions(obj: Path) -> list[tuple[str, str]]:
    """(name, nm type letter) of every global symbol `obj` defines."""
    out = subprocess.run(["nm", "-g", "--defined-only", "--format=posix", str(obj)], capture_output=True,
                         text=True, timeout=60).stdout
    return [(f[0], f[1]) for f in (line.split() for line in out.splitlines()) if len(f) >= 2]


def definition_problem(name: str, kind: str, cuda: bool) -> str | None:
    """Why defining `name` (nm type `kind`) in a submitted object is refused, or None."""
    if kind == "i":
        return "is an ifunc: its resolver runs while the program loads, before the test main"
    if cuda and NVCC_NAMES.match(name):
        return None
    space = _namespace(name)
    if space is None:
        if COMPILER_C_NAMES.match(name):
            return None
        return ("is a C name: defined in the test program it takes the place of the system's "
                "(libc, MPI) everywhere, the test main included")
    if space == "operator":
        return "replaces the global operator new or delete of the whole test program"
    if kind in STRONG and (space != "dtl" or name.startswith(HARNESS_INTERNALS)):
        return "is defined outside the lab's namespace (dtl::, not the harness's dtl::testing or dtl::trace)"
    return None


def check_objects(tree: Path, build_dir: Path, lab_name: str) -> list[Refusal]:
    """Start-up code and definitions of the lab's student library (see the docstring)."""
    found = []
    for file, obj in student_objects(tree, build_dir, lab_name).items():
        for section in _sections(obj):
            if EARLY_SECTIONS.match(section):
                found.append(Refusal(file, section, f"section {section}",
                                     "start-up code that would run before the test main (a prioritized "
                                     "constructor, .preinit_array, .init or .ctors): code under grading "
                                     "starts in the tests, or in a plain static initializer"))
        for name, kind in _definitions(obj):
            why = definition_problem(name, kind, file.endswith(".cu"))
            if why is not None:
                found.append(Refusal(file, name, _demangle(name), f"the definition {why}"))
    return found


def _demangle(name: str) -> str:
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True, timeout=10).stdout.strip() or name
    except (OSError, subprocess.TimeoutExpired):
        return name


def asm_lines(text: str, submitted: set[str] | None) -> list[tuple[str, int, str]]:
    """(file, line, token) for each assembly token in `text`: a preprocessor's output
    (with linemarkers; only lines from the files in `submitted` count) or, with
    `submitted` None, a source file's own text. Comments and literals do not count."""
    found = []
    current, line_no = "", 0
    lines = text.splitlines()
    for raw in lines:
        marker = _LINEMARKER.match(raw) if submitted is not None else None
        if marker:
            line_no, current = int(marker.group(1)) - 1, marker.group(2)  # the next line is line N
            continue
        line_no += 1
        if submitted is not None and current not in submitted:
            continue
        stripped = _LITERAL.sub('""', raw) if "asm" in raw or "incbin" in raw else raw
        if submitted is None:
            stripped = re.sub(r"//.*", "", stripped)
        for m in ASM_TOKEN.finditer(stripped):
            found.append((current, line_no, m.group(0)))
    return found


def _preprocess(entry: dict) -> str | None:
    """The preprocessed text of one compile command (a host C++ compile), or None."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    cmd, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-fdiagnostics-color"):
            continue
        cmd.append(a)
    if cmd and cmd[0].endswith("ccache"):
        cmd = cmd[1:]
    # In the build's sandbox: the preprocessor opens whatever the sources include.
    return read_confined(cmd + ["-E", "-o", "-"], Path(entry["directory"]), 120)


def check_assembly(tree: Path, build_dir: Path, lab_name: str) -> list[Refusal]:
    """Assembly in the submitted files of lab `lab_name` (see the docstring)."""
    src = (tree / "labs" / lab_name / "src").resolve()
    submitted = {str(p.resolve()) for p in src.iterdir() if p.is_file()}
    by_name = {str(p.resolve()): f"src/{p.name}" for p in src.iterdir() if p.is_file()}
    found: dict[tuple[str, int], Refusal] = {}

    def note(path: str, line: int, token: str) -> None:
        rel = by_name.get(path, path)
        found.setdefault((rel, line), Refusal(rel, token, f"{token} at line {line}",
                                              "inline assembly (raw system calls, .incbin of any file) is "
                                              "not C++ a lab asks for"))

    # The submitted files' own text: .cu files, and headers a build may not include.
    for path in sorted(submitted):
        text = Path(path).read_text(errors="replace")
        for _, line, token in asm_lines(text, None):
            note(path, line, token)
    # The preprocessed host C++ of every translation unit of the student library.
    try:
        db = json.loads(subprocess.run(["ninja", "-C", str(build_dir), "-t", "compdb"], capture_output=True,
                                       text=True, timeout=120).stdout or "[]")
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        db = []
    marker = f"/dtl_lab{lab_name[:2]}_student.dir/"
    for entry in db:
        if marker not in entry.get("output", "") or entry.get("file", "").endswith(".cu"):
            continue
        text = _preprocess(entry)
        if text is None:
            continue  # it compiled a moment ago; the source scan above still covers it
        directory = entry["directory"]
        for file, line, token in asm_lines(text, _spellings(submitted, directory)):
            note(os.path.normpath(os.path.join(directory, file)), line, token)
    return list(found.values())


def _spellings(paths: set[str], directory: str) -> set[str]:
    """`paths` as absolute and as relative to `directory`: linemarkers use the
    spelling the compiler was given."""
    return paths | {os.path.relpath(p, directory) for p in paths}
