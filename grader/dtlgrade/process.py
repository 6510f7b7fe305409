"""Starting a command that compiles or runs a submission's code.

run_capped() runs one command in its own session with a wall-clock limit and a
cap on its output (a flood ends the run), keeps the head and the tail of what it
printed, and kills the whole session when the command ends or is stopped
(kill_session()). run_mpi() is `mpirun ARGS` through run_capped() with the
environment every MPI run of the grader gets. See Note [One door].
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .sandbox import Sandbox
from .turns import work_turn

OUTPUT_KEEP_HEAD = 48 << 10         # bytes of a run's output kept from its start...
OUTPUT_KEEP_TAIL = 16 << 10         # ...and from its end
OUTPUT_FLOOD_BYTES = 16 << 20       # more output than this ends the run as a flood
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}

# Note [One door]
# ~~~~~~~~~~~~~~~
# Every process that compiles or runs code from a submission starts in
# run_capped(): the configure and the build (build.build()), and every mpirun
# (run_mpi(): the test listing and runs in runner.py, the benchmark runs in
# perf.py). Nothing else in the grader starts one; the other commands it runs
# are its own (`ninja -t deps` reading the build's dependency log,
# `nvidia-smi -L`). So whatever confines a submission -- a sandbox around the
# command, resource limits, a kill that reaches every process it started -- is
# added here, once, and covers the build and the runs alike. The grader reads a
# run's results from files the run writes in its working folder (`cwd`: gtest's
# JSON, the progress file, the tracer's state files, a benchmark's JSON); a
# build writes its build folder and the compiler cache.
#
# What is added here: confine(box) names the sandbox (sandbox.py) the next
# commands run in -- grading.grade_one() sets the build's, then the runs' -- and
# every command started goes into LIVE_SESSIONS until it ends, so that an
# interrupted grader can kill what it started (interrupt()); and every command
# holds a work turn (turns.py) while it runs, so that no speed item of another
# grading measures beside it.

_box: Sandbox | None = None
_building = False
LIVE_SESSIONS: set[int] = set()


def confine(box: Sandbox | None, building: bool = False) -> None:
    """Runs the next commands inside `box` (None: unconfined), with a build's
    resource limits when `building`."""
    global _box, _building
    _box, _building = box, building


def interrupt() -> None:
    """Kills every command still running (the grader was interrupted)."""
    for sid in list(LIVE_SESSIONS):
        kill_session(sid)


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
    """Runs `cmd` in a new session, inside the sandbox confine() named (with its
    resource limits); kills the whole session after `limit` seconds or after
    OUTPUT_FLOOD_BYTES of output. Keeps the head and the tail of the output.
    Waits for its work turn first (turns.py); `limit` counts from the start."""
    with work_turn():
        return _run_capped(cmd, env, cwd, limit, on_timeout)


def _run_capped(cmd: list[str], env: dict, cwd: Path, limit: float, on_timeout) -> RunResult:
    start = time.monotonic()
    box = _box
    if box is not None:
        cmd = box.wrap(cmd, cwd)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=box.limits(_building) if box is not None else None)
    LIVE_SESSIONS.add(proc.pid)
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
    LIVE_SESSIONS.discard(proc.pid)
    thread.join(timeout=5)
    if not thread.is_alive():  # else a process left behind still holds the pipe: the reader owns it
        proc.stdout.close()
    text = head.decode(errors="replace")
    if total[0] > len(head) + len(tail):
        text += f"\n... [{total[0] - len(head) - len(tail)} bytes of output cut] ...\n"
    text += tail.decode(errors="replace")
    return RunResult(proc.returncode, text, time.monotonic() - start, timed_out, flooded.is_set())


def read_confined(cmd: list[str], cwd: Path, limit: float, cap: int = 256 << 20) -> str | None:
    """The whole standard output of `cmd` (at most `cap` bytes), run like
    run_capped() in the sandbox confine() named, or None when it failed, timed out
    or printed more: for the grader's own reading of what a submission's sources
    expand to (objects.py runs the preprocessor), which must not leave the sandbox
    either (an #include can name any file)."""
    box = _box
    wrapped = box.wrap(cmd, cwd) if box is not None else cmd
    try:
        with work_turn():
            proc = subprocess.run(wrapped, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=limit,
                                  start_new_session=True,
                                  preexec_fn=box.limits(_building) if box is not None else None)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or len(proc.stdout) > cap:
        return None
    return proc.stdout.decode(errors="replace")


def run_mpi(args: list[str], cwd: Path, limit: float, env: dict | None = None, on_timeout=None) -> RunResult:
    """Runs `mpirun ARGS` through run_capped(), with MPI_ENV and then `env` on top
    of the grader's own environment."""
    return run_capped(["mpirun", *args], dict(os.environ, **MPI_ENV, **(env or {})), cwd, limit, on_timeout)
