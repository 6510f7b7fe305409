"""An interrupted grader (SIGTERM from a batch script's timeout, or Ctrl-C) kills
the runs it started and removes its temporary tree: graded here on lab 01 with a
ring that deadlocks, stopped with SIGTERM while a test is hanging."""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402
from test_deadlock import DEADLOCKING_RING  # noqa: E402


def descendants(pid: int) -> list[int]:
    """Every process whose chain of parents reaches `pid`."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        children = [c for c, parent in parents.items() if parent == p]
        found += children
        todo += children
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class TestInterrupt(unittest.TestCase):
    def test_sigterm_kills_runs_and_removes_the_tree(self):
        tmp = Path(tempfile.mkdtemp(prefix="dtl-grader-test-"))
        self.addCleanup(subprocess.run, ["rm", "-rf", str(tmp)])
        sub = helpers.make_submission(tmp / "sub", "ring_shift", DEADLOCKING_RING)
        private = tmp / "tmp"  # the grader's TMPDIR: its temporary tree goes here, and only its own
        private.mkdir()
        args = [sys.executable, str(helpers.GRADE_PY), "01", "--submission", str(sub), "--no-hidden"]
        if not helpers.sandbox_works():
            args.append("--no-sandbox")
        proc = subprocess.Popen(args, cwd=helpers.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, TMPDIR=str(private)))
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # until a test run has started
            if list(private.glob("dtl-grade-01-*/runs/np*")):
                break
            time.sleep(0.5)
        self.assertTrue(list(private.glob("dtl-grade-01-*/runs/np*")), "the grading never reached its test runs")
        time.sleep(3)  # inside the first hanging test now (its watchdog waits 10 s)
        started = descendants(proc.pid)
        self.assertTrue(started, "no run in flight to kill")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, out[-2000:])
        self.assertIn("interrupted by signal", out)
        alive = started
        for _ in range(20):  # SIGKILL is asynchronous: give the kernel a moment
            alive = [p for p in started if running(p)]
            if not alive:
                break
            time.sleep(0.25)
        self.assertEqual(alive, [], "processes of the interrupted grading are still running")
        self.assertEqual(list(private.iterdir()), [], "the temporary tree was not removed")


if __name__ == "__main__":
    unittest.main()
