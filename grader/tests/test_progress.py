"""The live status line of long runs (dtlgrade/progress.py): drawn and erased on a
terminal (a pseudo-terminal here), absent on a pipe, in CI and when turned off."""
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


if __name__ == "__main__":
    unittest.main()
