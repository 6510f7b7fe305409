"""Students' files hold what students write (issue 25, "Given code in src/").

Every definition at namespace scope in reference/NN_topic/src (a free function, a
member function, a class or struct) must hold a solution block, or sit inside one:
a whole function the student does not write belongs in labs/NN_topic/given/ (or the
harness, where two labs use it), so it is neither in the skeleton the student edits
nor in what a submission can change. What may stay around a solution block is glue:
includes, a signature, the argument checks before the block, the return after it.

This reads the sources only (no build, well under a second). Run as a script, it
also prints the code lines outside and inside solution blocks, per file with -v:

    python3 grader/tests/test_given_code.py [-v]
"""
from __future__ import annotations

import re
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".cc", ".cu", ".h", ".cuh")


def strip(line: str) -> str:
    """The line without its // comment and with string and character literals emptied."""
    line = re.sub(r'"([^"\\]|\\.)*"', '""', line)
    line = re.sub(r"'([^'\\]|\\.)*'", "''", line)
    return re.sub(r"//.*", "", line)


def whole_given_definitions(path: Path) -> list[tuple[int, str]]:
    """(line, first line) of every namespace-scope definition in `path` with no solution block."""
    found = []
    depth = ns_depth = 0
    current = None  # [first line, text, code lines, holds a solution, depth at start]
    header: list[str] = []
    in_solution = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if "BEGIN SOLUTION" in line:
            in_solution = True
        if "END SOLUTION" in line:
            in_solution = False
        s = strip(line)
        if current is None:
            if depth == ns_depth and s.strip():
                header.append(s.strip())
            if "{" in s and depth == ns_depth:
                text = " ".join(header)
                header = []
                if re.match(r"namespace\b", text) or text.startswith('extern ""'):
                    ns_depth += 1
                    depth += s.count("{") - s.count("}")
                    continue
                current = [number, text, 0, in_solution, depth]
            if depth == ns_depth and (s.strip().endswith((";", "}")) or s.strip().startswith("#")):
                header = []
        if current is not None:
            current[3] = current[3] or "BEGIN SOLUTION" in line
            current[2] += bool(s.strip())
        depth += s.count("{") - s.count("}")
        ns_depth = min(ns_depth, depth)
        if current is not None and depth == current[4] and ("}" in s or s.strip().endswith(";")):
            if not current[3] and current[2] > 1:
                found.append((current[0], current[1][:80]))
            current = None
    return found


def code_lines(path: Path) -> tuple[int, int]:
    """(given, solution): code lines (not blank, not only a comment) outside and inside solution blocks."""
    given = solution = 0
    inside = in_comment = False
    for line in path.read_text().splitlines():
        s = line.strip()
        if "BEGIN SOLUTION" in s or "END SOLUTION" in s:
            inside = "BEGIN SOLUTION" in s
            continue
        if in_comment:
            in_comment = "*/" not in s
            continue
        if s.startswith("/*"):
            in_comment = "*/" not in s
            continue
        if s and not s.startswith("//"):
            solution += inside
            given += not inside
    return given, solution


def sources() -> list[Path]:
    return sorted(p for p in ROOT.glob("reference/*/src/*") if p.suffix in SUFFIXES)


class TestGivenCode(unittest.TestCase):
    def test_no_whole_given_function_in_src(self):
        problems = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in sources()
                    for line, text in whole_given_definitions(p)]
        self.assertEqual(problems, [], "whole given definitions in reference/*/src (move them to "
                                       "labs/NN_topic/given/, labs/README.md):\n" + "\n".join(problems))


if __name__ == "__main__":
    if "-v" in sys.argv or "--count" in sys.argv:
        total = [0, 0]
        for p in sources():
            g, s = code_lines(p)
            total[0] += g
            total[1] += s
            if "-v" in sys.argv:
                print(f"{g:5d} {s:5d}  {p.relative_to(ROOT)}")
        print(f"code lines in reference/*/src: {total[0]} given (outside solution blocks), "
              f"{total[1]} in solution blocks, {sum(total)} in all")
        for p in sources():
            for line, text in whole_given_definitions(p):
                print(f"whole given definition: {p.relative_to(ROOT)}:{line}: {text}")
    else:
        unittest.main()
