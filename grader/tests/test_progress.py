"""The live status line of long runs (dtlgrade/progress.py): drawn and erased on a
terminal (a pseudo-terminal here), absent on a pipe, in CI and when turned off. A
batch's progress line: the bar, the count with the submissions kept from an
earlier run, and an estimate of the time left from this run's steps only
(test_batch_resume.py checks the lines a batch prints)."""
import io
import os
import pty
import select
import sys
import time
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dtlgrade import progress  # noqa: E402


def read_all(fd: int) -> str:
    """Everything written to the pseudo-terminal so far (one read may return only part)."""
    chunks = []
    while select.select([fd], [], [], 0.5)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


class TestStatus(unittest.TestCase):
    def test_a_terminal_sees_the_status_then_its_erasure(self):
        master, slave = pty.openpty()
        try:
            with open(slave, "w", closefd=False) as tty, mock.patch.dict(os.environ, {}, clear=False):
                os.environ.pop("CI", None)
                os.environ.pop("DTL_NO_PROGRESS", None)
                self.assertTrue(progress.wanted(tty))
                with progress.Status("running test at 3 rank(s): 53 tests", stream=tty, every=0.05):
                    time.sleep(0.2)
            out = read_all(master)
        finally:
            os.close(master)
            os.close(slave)
        self.assertIn("running test at 3 rank(s): 53 tests ... 0 s", out)
        self.assertGreaterEqual(out.count("running test at 3 rank(s)"), 2, "the line is redrawn while it runs")
        self.assertTrue(out.endswith("\r\033[K"), repr(out[-40:]))

    def test_quiet_on_a_pipe_in_ci_and_when_turned_off(self):
        buf = io.StringIO()
        with progress.Status("building", stream=buf, every=0.01):
            time.sleep(0.05)
        self.assertEqual(buf.getvalue(), "")
        master, slave = pty.openpty()
        try:
            with open(slave, "w", closefd=False) as tty:
                with mock.patch.dict(os.environ, {"CI": "true"}):
                    self.assertFalse(progress.wanted(tty))
                with mock.patch.dict(os.environ, {"DTL_NO_PROGRESS": "1"}):
                    self.assertFalse(progress.wanted(tty))
                self.assertFalse(progress.wanted(tty, quiet=True))
        finally:
            os.close(master)
            os.close(slave)


class TestBatchProgress(unittest.TestCase):
    def test_two_steps_each_and_kept_ones(self):
        now = [0.0]
        with mock.patch.object(progress.time, "monotonic", lambda: now[0]):
            bar = progress.BatchProgress(10, kept=4, steps_each=2)  # --jobs: correctness, then speed
            now[0] = 60.0
            bar.step()  # one of the 6 left is half done after 60 s (4.5 of 10: 13 of 30 marks); 11 steps of 60 s to go
            self.assertEqual(bar.line("x"), "[#############.................] 4/10 graded (4 kept from before), "
                                            "1 min 00 s so far, ETA 11 min 00 s: x")
            for _ in range(11):
                bar.step()
            self.assertTrue(bar.line().endswith("10/10 graded (4 kept from before), 1 min 00 s so far, done"))

    def test_duration(self):
        self.assertEqual([progress.duration(s) for s in (0, 59.4, 60, 3599, 3600, 7620)],
                         ["0 s", "59 s", "1 min 00 s", "59 min 59 s", "1 h 00 min", "2 h 07 min"])


if __name__ == "__main__":
    unittest.main()
