#!/usr/bin/env python3
"""The solution generator: reference/NN_topic/src -> labs/NN_topic/src.

reference/ is the only place a solution is written. Inside it, each part a
student writes stands between two marker lines; contract lines may follow BEGIN
(what the block must achieve, its errors, the handout section; never the steps,
which are the handout's graded hints: grader/tests/test_contracts.py checks):

    // BEGIN SOLUTION(ring_shift)
    // | Every rank's send_buf arrives in the next rank's recv_buf, one message ...
    ...the solution...
    // END SOLUTION

In labs/ the block becomes the contract as a TODO(student) comment plus a stub
that fails cleanly (it never hangs and never crashes):

    // TODO(student): Every rank's send_buf arrives in the next rank's recv_buf, one message ...
    throw dtl::NotImplemented("ring_shift");

A block without a name, `// BEGIN SOLUTION`, becomes the TODO comment only (for
helpers at file scope). Everything outside the blocks is copied unchanged.

Every source file in reference/NN_topic/src holds at least one block: src/ is
exactly what a student edits. Code a student is handed but does not write lives
once in labs/NN_topic/given/ (compiled into both builds, never submitted); a
solution-free file in reference/ is refused, naming that folder.

usage: skeleton.py [--check] [ROOT]     (ROOT: the repository, default: here)
  --check  change nothing; list every file in labs/ that differs from what the
           generator makes, and exit 1 if any does.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>\s*)// BEGIN SOLUTION(?:\((?P<name>[A-Za-z_][\w:]*)\))?\s*$")
HINT = re.compile(r"^\s*// \|\s?(?P<text>.*)$")
END = re.compile(r"^\s*// END SOLUTION\s*$")
SOURCE_SUFFIXES = {".cc", ".h", ".cu", ".cuh"}


class MarkerError(Exception):
    """A malformed BEGIN/END SOLUTION block, with file:line."""


def transform(text: str, origin: str = "<text>") -> str:
    """Returns the student version of one reference source file."""
    out: list[str] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if END.match(line):
            raise MarkerError(f"{origin}:{i + 1}: END SOLUTION without a BEGIN SOLUTION")
        m = BEGIN.match(line)
        if not m:
            if "TODO(student)" in line:
                raise MarkerError(f"{origin}:{i + 1}: TODO(student) belongs in labs/, not in reference/")
            out.append(line)
            i += 1
            continue
        indent, name, start = m.group("indent"), m.group("name"), i + 1
        i += 1
        hints: list[str] = []
        while i < len(lines) and HINT.match(lines[i]):
            hints.append(HINT.match(lines[i]).group("text").rstrip())
            i += 1
        while i < len(lines) and not END.match(lines[i]):
            if BEGIN.match(lines[i]):
                raise MarkerError(f"{origin}:{i + 1}: BEGIN SOLUTION inside the block opened at line {start}")
            i += 1
        if i == len(lines):
            raise MarkerError(f"{origin}:{start}: BEGIN SOLUTION without an END SOLUTION")
        i += 1  # the END line
        hints = hints or ["implement this part (see the handout)."]
        out.append(f"{indent}// TODO(student): {hints[0]}\n")
        out.extend(f"{indent}//   {h}\n" if h else f"{indent}//\n" for h in hints[1:])
        if name:
            out.append(f'{indent}throw dtl::NotImplemented("{name}");\n')
    return "".join(out)


def lab_pairs(root: Path):
    """Yields (reference src folder, labs src folder) for every lab."""
    for ref in sorted((root / "reference").glob("[0-9][0-9]_*/src")):
        yield ref, root / "labs" / ref.parent.name / "src"


def expected_files(ref: Path) -> dict[str, str]:
    files = {}
    for path in sorted(ref.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(ref))
            text = path.read_text()
            if path.suffix in SOURCE_SUFFIXES:
                files[rel] = transform(text, str(path))
                if "TODO(student)" not in files[rel]:
                    given = Path("labs") / ref.parent.name / "given"
                    raise MarkerError(f"{path}: no BEGIN SOLUTION block, so nothing for a student to write: "
                                      f"code handed to students lives once in {given}/ (labs/README.md)")
            else:
                files[rel] = text
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report differences, change nothing")
    parser.add_argument("root", nargs="?", default=Path(__file__).resolve().parent.parent, type=Path)
    args = parser.parse_args(argv)
    stale = []
    try:
        for ref, lab in lab_pairs(args.root):
            want = expected_files(ref)
            have = {str(p.relative_to(lab)): p for p in lab.rglob("*") if p.is_file()} if lab.exists() else {}
            for rel, text in want.items():
                target = lab / rel
                current = target.read_text() if target.exists() else None
                if current == text:
                    continue
                if args.check:
                    stale.append(str(target))
                    diff = difflib.unified_diff((current or "").splitlines(True), text.splitlines(True),
                                                str(target), f"generated from {ref / rel}")
                    sys.stdout.writelines(list(diff)[:40])
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text)
                    print(f"wrote {target}")
            for rel in sorted(set(have) - set(want)):
                if args.check:
                    stale.append(f"{lab / rel} (no such file in {ref})")
                else:
                    have[rel].unlink()
                    print(f"removed {lab / rel}")
    except MarkerError as e:
        print(f"skeleton: {e}", file=sys.stderr)
        return 2
    if stale:
        print("labs/ differs from what the generator makes of reference/:\n  " + "\n  ".join(stale) +
              "\nrun ./dtl generate to update labs/ (students: never edit reference/).", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
