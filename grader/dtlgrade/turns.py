"""Turns on the machine: speed is measured alone, everything else shares.

Several gradings may run on one machine at once: an instructor's batch,
`./dtl grade` beside it, `./dtl test`'s classes. They may build and run tests
side by side, but a speed item measured while anything else runs measures that
too. So every command a grader starts (process.run_capped(): its builds and its
runs, Note [One door]) holds a *work turn*, which any number of commands hold
at once, and every speed item holds the *speed turn*, which it holds alone:
while it measures, no other grading's command runs, and it starts only once the
commands already running have ended. See Note [Turns].
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

# The lock files every grader on this machine shares: in /tmp itself, not in
# $TMPDIR, which a grader may be given for its own temporary files (and the
# sandbox's /tmp is its own, so a submission cannot reach them).
LOCK_FILE = Path("/tmp/dtl-grade-speed.lock")
GATE_FILE = Path("/tmp/dtl-grade-speed.gate")

_holding_speed = False  # this process holds the speed turn: its own commands are the measurement

# Note [Turns]
# ~~~~~~~~~~~~
# A readers-writer lock between processes, made of two flock(2) files.
#
#   work turn:  GATE shared (wait while a speed turn holds it), then LOCK shared,
#               then GATE released; LOCK is held while the command runs.
#   speed turn: GATE exclusive (no new work starts), then LOCK exclusive (wait
#               for the work already running to end), held while measuring.
#
# flock(2) alone is not fair: a speed turn asking for LOCK exclusive would wait
# as long as any work turn holds it, and two gradings taking turns at work keep
# one held nearly always, so the speed item could wait for ever. The gate is the
# turnstile: once a speed turn holds it, new work waits there, and the work in
# flight drains (each command is bounded by its own time limit). Work holds the
# gate only for the instant between its two flocks, so a speed turn gets the
# gate at once.
#
# A process that holds the speed turn takes no work turn for its own commands
# (they are what it measures; asking would wait for itself for ever). Each turn
# opens its own file description, so turns of one process are independent, as
# flock(2) locks of different descriptions are.
#
# What takes no turn runs beside a speed item: the grader's own Python, a
# sandbox starting, `ninja -t deps`. The noise guard (perf.py, Note [Noise
# guard]) sees what load is left, and can only leave an item out, never cost
# points.


def _lock(path: Path, how: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def speed_turn(log=print):
    """Holds the machine alone while the block runs: no other grading's command
    runs, and two gradings never measure speed at the same time. Says so when it
    has to wait."""
    global _holding_speed
    if _holding_speed:  # already this process's turn (a speed item inside another)
        yield
        return
    t0 = time.monotonic()
    try:
        gate = _lock(GATE_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB)
        waited_for = ""
    except BlockingIOError:
        log("  waiting for another grading's speed items to finish (one at a time on this machine) ...")
        gate = _lock(GATE_FILE, fcntl.LOCK_EX)
        waited_for = "speed"
    try:
        try:
            lock = _lock(LOCK_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited_for:
                log("  waiting for the commands other gradings are running to end ...")
            lock = _lock(LOCK_FILE, fcntl.LOCK_EX)
            waited_for = waited_for or "work"
        if waited_for:
            log(f"  ... waited {time.monotonic() - t0:.0f} s")
        try:
            _holding_speed = True
            yield
        finally:
            _holding_speed = False
            os.close(lock)  # closing releases the lock
    finally:
        os.close(gate)


@contextmanager
def work_turn():
    """Holds a work turn while the block runs: it waits while a speed item
    measures, and a speed item waits for it to end. A no-op in the process that
    holds the speed turn."""
    if _holding_speed:
        yield
        return
    gate = _lock(GATE_FILE, fcntl.LOCK_SH)
    try:
        lock = _lock(LOCK_FILE, fcntl.LOCK_SH)
    finally:
        os.close(gate)
    try:
        yield
    finally:
        os.close(lock)
