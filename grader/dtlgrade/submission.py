"""What of a submission is graded, and the pristine tree it is graded in.

submission_sources() finds the lab's src files in what was handed in (a folder
of them, or a checkout of the repository). copy_pristine_tree() copies from this
repository everything the build needs (CMake, harness, the lab's headers and
tests, the hidden tests) into a fresh folder; install_submission() then drops in
only the lab's gradable file names, only regular files of at most
MAX_SOURCE_BYTES, and install_dependencies() does the same for the labs this lab
links. make_tree() is those three steps in order. Tests, headers and harness are
never the student's.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .lab import ROOT, GraderError, Lab, skeleton_src

MAX_SOURCE_BYTES = 1 << 20          # a single submitted file larger than this is refused


def submission_sources(lab: Lab, args) -> tuple[Path, str]:
    """Returns (folder holding the lab's src files, a description of it)."""
    if args.reference:
        return ROOT / "reference" / lab.name / "src", "the reference solution"
    if args.skeleton:
        return skeleton_src(lab.name), "the student skeleton"
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
    labs = [each.name for each in lab.with_dependencies]  # the labs this one links are built with it
    for folder in ("cmake", "harness", "datasets", *[f"{top}/{name}" for name in labs for top in ("labs", "reference")]):
        if (ROOT / folder).is_dir():  # reference/ is absent from a student repository
            # datasets/: the library only (labs 04-07 link it); not its tests or fetched data.
            skip = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "data") if folder == "datasets" else ignore
            shutil.copytree(ROOT / folder, dest / folder, ignore=skip)
    for name in labs:  # files a submission lacks are the skeleton's, even in a student repository
        if skeleton_src(name) != ROOT / "labs" / name / "src":
            shutil.rmtree(dest / "labs" / name / "src")
            shutil.copytree(skeleton_src(name), dest / "labs" / name / "src", ignore=ignore)
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
        if src.is_symlink():
            notes.append(f"{rel}: is a symbolic link, refused (only regular files are graded); "
                         "graded as the skeleton's (not implemented)")
            continue
        if not src.is_file():
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


def dependency_sources(dep: Lab, source: Path, args) -> tuple[Path | None, str]:
    """Where the submission's files of dependency lab `dep` are: the reference's for
    --reference, none (the skeleton stays) for --skeleton, your own labs/<dep>/src by
    default, and for --submission DIR the first of DIR/labs/<dep>/src, DIR/<dep>/src,
    and the lab's own source folder that holds at least one of dep's file names."""
    if args.reference:
        return ROOT / "reference" / dep.name / "src", "the reference"
    if args.skeleton:
        return None, "the skeleton"
    if args.submission is None:
        return ROOT / "labs" / dep.name / "src", f"your labs/{dep.name}/src"
    sub = Path(args.submission).resolve()
    names = dep.src_names
    for candidate in (sub / "labs" / dep.name / "src", sub / dep.name / "src", sub / dep.name, source):
        if candidate.is_dir() and any((candidate / n).is_file() for n in names):
            return candidate, f"{candidate}"
    return None, "the skeleton"


def install_dependencies(lab: Lab, source: Path, tree: Path, args) -> list[str]:
    """Copies the submission's files of each dependency lab into the tree (same rules
    as install_submission()); returns notes saying where they came from."""
    notes = []
    for dep in lab.dependencies:
        folder, where = dependency_sources(dep, source, args)
        if folder is None:
            notes.append(f"lab {dep.number} (which lab {lab.number} builds on): graded with {where}'s files; "
                         f"the items that need it fail with NotImplemented")
            continue
        missing = []
        for rel in dep.src_names:
            src = folder / rel
            if src.is_symlink() or not src.is_file() or src.stat().st_size > MAX_SOURCE_BYTES:
                missing.append(rel)
                continue
            shutil.copyfile(src, tree / "labs" / dep.name / "src" / rel)
        note = f"lab {dep.number} (which lab {lab.number} builds on): files from {where}"
        if missing:
            note += f"; not found there, so the skeleton's: {', '.join(missing)}"
        notes.append(note)
    return notes


def make_tree(lab: Lab, source: Path, tree: Path, hidden_dirs: list[Path], args) -> list[str]:
    """Fills the empty folder `tree`: the pristine tree, then the submission's files
    of the lab and of the labs it links. Returns the notes on what was taken."""
    copy_pristine_tree(lab, tree, hidden_dirs)
    # A flat upload may hold a dependency lab's files beside the lab's: not "ignored".
    notes = install_submission(lab, source, tree / "labs" / lab.name / "src",
                               also_used={n for dep in lab.dependencies for n in dep.src_names})
    notes += install_dependencies(lab, source, tree, args)
    return notes
