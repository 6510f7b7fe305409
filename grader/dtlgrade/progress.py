"""A live status line for long runs on a terminal: what is running now and for how
long ("  running test at 3 rank(s): 53 tests ... 12 s"), rewritten in place every
half second and erased when the step ends, so the permanent lines the grader prints
stay as they were. And a batch's progress bar with an estimate of the time left
(BatchProgress), printed as a line after each submission.

Quiet wherever nobody watches: when the stream is not a terminal (CI, a pipe, a log
file), when `CI` or `DTL_NO_PROGRESS` is set in the environment, or when the caller
turns it off (`--json`: a machine reads the result).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO


def wanted(stream: TextIO, quiet: bool = False) -> bool:
    """Whether a status line belongs on `stream`."""
    if quiet or os.environ.get("DTL_NO_PROGRESS") or os.environ.get("CI"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Status:
    """`with Status("building"):` shows "building ... N s" until the block ends."""

    def __init__(self, what: str, stream: TextIO | None = None, enabled: bool | None = None, every: float = 0.5):
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def _draw(self) -> None:
        self.stream.write(f"\r\033[K  {self.what} ... {time.monotonic() - self._start:.0f} s")
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._draw()

    def __enter__(self) -> "Status":
        if self.enabled:
            self._start = time.monotonic()
            self._draw()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.stream.write("\r\033[K")  # erase the status: the next permanent line takes its place
            self.stream.flush()


# Whether grade_one's steps show a status line; cli.main turns it off for --json.
ENABLED = True


def status(what: str) -> Status:
    """A Status on stderr, shown only where wanted() and ENABLED agree."""
    return Status(what, enabled=ENABLED and wanted(sys.stderr))


def duration(seconds: float) -> str:
    """'45 s', '3 min 05 s', '2 h 07 min'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s // 60 % 60:02d} min"


class BatchProgress:
    """The progress of a batch, a line after each step: a bar, the count, the time
    so far and an estimate of the time left ("ETA"), from the mean time of the
    steps done in this run. A step is one submission graded; with --jobs, one
    submission's correctness runs or its speed items and report, so a submission
    is two steps. Submissions an earlier run finished (`kept`) are shown as done
    and do not count toward the estimate. Printed as plain lines, not redrawn in
    place: a batch's log is read later as often as it is watched."""

    WIDTH = 30

    def __init__(self, submissions: int, kept: int = 0, steps_each: int = 1):
        self.total = submissions - kept
        self.kept, self.submissions = kept, submissions
        self.steps_each = steps_each
        self.steps = 0
        self.start = time.monotonic()

    def step(self) -> None:
        self.steps += 1

    def line(self, what: str = "") -> str:
        """The bar as it stands, e.g.
        "[##########....................] 12/30 graded (2 kept), 4 min 10 s so far, ETA 6 min 15 s: alice"."""
        all_steps = self.total * self.steps_each
        done = self.kept + self.steps / self.steps_each
        filled = int(self.WIDTH * done / self.submissions) if self.submissions else self.WIDTH
        elapsed = time.monotonic() - self.start
        if self.steps >= all_steps:
            eta = "done"
        elif self.steps == 0:
            eta = "ETA unknown until the first finishes"
        else:
            eta = f"ETA {duration(elapsed / self.steps * (all_steps - self.steps))}"
        kept = f" ({self.kept} kept from before)" if self.kept else ""
        count = f"{int(done)}/{self.submissions}"
        return (f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {count} graded{kept}, {duration(elapsed)} so far, "
                f"{eta}{': ' + what if what else ''}")
