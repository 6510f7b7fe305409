"""Runs the grader's own tests, one test class per process, several at once
where the cores allow, and says how long each took.

    python3 grader/tests/run_suite.py [--jobs N] [--times FILE] [test_module ...]

Most test classes grade a whole lab once (in setUpClass), and a grading spends
much of its time waiting: for a deadlock's timeout, a hidden test's silent
worker, a sandbox to start. Running two at once on a 2-core machine fills those
waits. A class that measures speed (it grades a reference's speed items and
expects full marks, or a slow submission's and expects a loss) could share the
machine too: its speed items take the machine's speed turn, so every other
class's builds and runs wait while they measure (grader/dtlgrade/turns.py; the
tests' own builds and runs take a work turn as a grading's do). But a speed turn
first waits for the work in flight to end, a deadlocked run's whole timeout or a
40 s ctest test, while the machine stands half idle; measured on the 2-core
machine, the suite took longer that way. So such a class says
`RUNS_ALONE = "why"` (on the class, or on its module for all of them); it runs
with nothing beside it, after the others.

With --times FILE the durations of the last run are read from FILE and written
back: the longest classes start first, so the last to finish is a short one.
With --ctest BUILD_DIR, ctest (everything but the skeletons) runs too, as one
more shared module, one test at a time, each in a work turn: its MPI programs
fill the cores a grading leaves idle while it waits, instead of running before
the classes with the machine to itself (`./dtl test` does this). Each module's CPU time is
reported beside its wall time: the user and system time of the processes it
waited for. It leaves out most of what ran inside the grader's sandbox (the
lab 02 reference's grading, 16 s of tests at 1 to 8 ranks, shows 2 s), so for a
class that grades it is a lower bound, not a measure of idle cores. Exit
status 0 only if every module passed; the failed ones are named at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# A module still running after this long is stopped and counted as failed: every
# grading inside has its own, shorter limit (helpers.GRADE_TIMEOUT), so this
# only catches a test that hangs outside them.
MODULE_LIMIT = 40 * 60
sys.path.insert(0, str(ROOT))  # grader.tests.* by name


@dataclass
class Module:
    name: str                       # test_deadlock.TestDeadlock: a test class, run in its own process
    alone: str | None               # why it runs alone, or None
    expected: float = 60.0          # seconds, from the last run (--times) or a guess
    command: list[str] | None = None  # what runs it (default: unittest on the class), from `cwd`
    cwd: Path = ROOT
    seconds: float = 0.0
    cpu: float = 0.0                # user + system seconds of the module and the processes it waited for
    returncode: int | None = None
    log: str = ""
    done: threading.Event = field(default_factory=threading.Event)


def test_classes(names: list[str]) -> list[tuple[str, type]]:
    """(module name, class) of every test class unittest's discovery finds in
    grader/tests, or in the modules `names`: each is run in a process of its own,
    so nothing discover would run is left out."""
    loader = unittest.TestLoader()
    if names:
        suite = loader.loadTestsFromNames([f"grader.tests.{n.removesuffix('.py')}" for n in names])
    else:
        suite = loader.discover(str(HERE), top_level_dir=str(ROOT))
    if loader.errors:
        sys.exit("run_suite: a test module does not import:\n" + "\n".join(loader.errors))
    found: dict[str, tuple[str, type]] = {}

    def walk(s: unittest.TestSuite) -> None:
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                cls = type(t)
                found.setdefault(f"{cls.__module__}.{cls.__qualname__}", (cls.__module__.rsplit(".", 1)[-1], cls))
    walk(suite)
    return [found[k] for k in sorted(found)]


def discover(names: list[str], times: dict[str, float]) -> list[Module]:
    """One Module per test class; RUNS_ALONE on the class, or on its module, marks it."""
    units = []
    for module, cls in test_classes(names):
        name = f"{module}.{cls.__qualname__}"
        alone = getattr(cls, "RUNS_ALONE", None) or getattr(sys.modules[cls.__module__], "RUNS_ALONE", None)
        units.append(Module(name, alone, times.get(name, 60.0)))
    return units


CTEST = ["ctest", "-LE", "^student$"]  # everything but the skeletons (the grader's classes grade them)


def ctest_module(build_dir: Path, times: dict[str, float]) -> Module:
    """ctest in `build_dir`, one test at a time, each in a work turn (ctest_in_turns())."""
    return Module("ctest", None, times.get("ctest", 300.0),
                  [sys.executable, str(Path(__file__).resolve()), "--ctest-in-turns", str(build_dir.resolve())],
                  build_dir.resolve())


def ctest_in_turns(build_dir: Path) -> int:
    """Runs ctest's tests in `build_dir` one at a time, each holding a work turn
    (an MPI test beside another class's speed item would be measured with it).
    Prints each test's ctest output; returns 0 if all passed."""
    sys.path.insert(0, str(ROOT / "grader"))
    from dtlgrade.turns import work_turn
    listing = subprocess.run([*CTEST, "-N"], cwd=build_dir, capture_output=True, text=True, check=True).stdout
    tests = re.findall(r"Test +#(\d+): (\S+)", listing)
    failed = []
    start = time.monotonic()
    for number, name in tests:
        with work_turn():
            run = subprocess.run([*CTEST, "-I", f"{number},{number}", "--output-on-failure", "--timeout", "600"],
                                 cwd=build_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 errors="replace")
        lines = run.stdout.splitlines()
        shown = [line for line in lines if f"#{number}:" in line] if run.returncode == 0 else lines
        print("\n".join(shown) + (run.stderr if run.returncode else ""), flush=True)
        if run.returncode != 0:
            failed.append(name)
    print(f"ctest: {len(tests) - len(failed)} of {len(tests)} passed in {time.monotonic() - start:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed or not tests else 0


def run_module(m: Module) -> None:
    start = time.monotonic()
    command = m.command or [sys.executable, "-m", "unittest", "-v", f"grader.tests.{m.name}"]
    with tempfile.TemporaryFile(mode="w+", errors="replace") as log:
        proc = subprocess.Popen(command, cwd=m.cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            os.killpg(proc.pid, 9)
        timer = threading.Timer(MODULE_LIMIT, stop)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # wait4: the CPU time too
        timer.cancel()
        proc.returncode = m.returncode = -9 if stopped.is_set() else os.waitstatus_to_exitcode(status)
        m.cpu = usage.ru_utime + usage.ru_stime
        if stopped.is_set():
            log.write(f"\nrun_suite: {m.name} still running after {MODULE_LIMIT} s: stopped\n")
        log.seek(0)
        m.log = log.read()
    m.seconds = time.monotonic() - start
    m.done.set()


def report(m: Module, lock: threading.Lock) -> None:
    verdict = "ok" if m.returncode == 0 else f"FAILED (exit {m.returncode})"
    with lock:
        print(f"== {m.name}: {verdict}, {m.seconds:.0f} s, {m.cpu:.0f} s CPU"
              f"{' (alone: ' + m.alone + ')' if m.alone else ''}",
              flush=True)
        print(m.log.rstrip(), flush=True)


def run(modules: list[Module], jobs: int) -> None:
    """Shared modules, longest first, `jobs` at a time; then each alone module by itself."""
    lock = threading.Lock()
    shared = sorted((m for m in modules if not m.alone), key=lambda m: -m.expected)
    alone = sorted((m for m in modules if m.alone), key=lambda m: -m.expected)
    slots = threading.Semaphore(max(1, jobs))

    def one(m: Module) -> None:
        try:
            run_module(m)
            report(m, lock)
        finally:
            slots.release()

    threads = []
    for m in shared:
        slots.acquire()
        t = threading.Thread(target=one, args=(m,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for m in alone:
        slots.acquire()
        one(m)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help="test modules to run (default: every grader/tests/test_*.py)")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="modules run at once, besides those that run alone (default: the usable CPUs)")
    ap.add_argument("--times", type=Path, help="a JSON file of each module's last duration: read, then rewritten")
    ap.add_argument("--ctest", type=Path, metavar="BUILD_DIR", help="run ctest in BUILD_DIR too, as a shared module")
    ap.add_argument("--ctest-in-turns", type=Path, metavar="BUILD_DIR", help=argparse.SUPPRESS)  # the ctest module
    args = ap.parse_args(argv)
    if args.ctest_in_turns:
        return ctest_in_turns(args.ctest_in_turns)
    times = json.loads(args.times.read_text()) if args.times and args.times.is_file() else {}
    modules = discover(args.modules, times)
    if args.ctest:
        modules.append(ctest_module(args.ctest, times))
    start = time.monotonic()
    run(modules, args.jobs)
    wall = time.monotonic() - start
    if args.times:
        times.update({m.name: round(m.seconds, 1) for m in modules})
        args.times.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    print("\n== grader tests: seconds per module, wall and CPU outside the sandbox (alone = with nothing beside it)")
    for m in sorted(modules, key=lambda m: -m.seconds):
        print(f"  {m.seconds:7.0f} {m.cpu:7.0f}  {m.name}{'  alone' if m.alone else ''}"
              f"{'' if m.returncode == 0 else '  FAILED'}")
    failed = [m.name for m in modules if m.returncode != 0]
    print(f"  {wall:7.0f} {sum(m.cpu for m in modules):7.0f}  in all ({len(modules)} modules, up to {args.jobs} "
          "at once; CPU: what ran outside the sandbox)")
    if failed:
        print(f"grader tests FAILED: {', '.join(failed)}")
        return 1
    print("grader tests: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
