"""The machine's turns (grader/dtlgrade/turns.py, Note [Turns]), between real
processes on lock files of the test's own, in seconds:

- a second grading's speed item waits for the first's;
- a speed item waits for the commands other gradings are running, and says so;
- a command waits while a speed item measures;
- the turnstile: once a speed item waits, new commands wait behind it, so two
  gradings taking turns at work cannot starve it;
- a speed item's own commands (process.run_capped() inside the speed turn) take
  no work turn, and do not wait for themselves;
- every grader finds the same lock files, whatever its $TMPDIR.
"""
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402  (puts grader/ on sys.path)

from dtlgrade import process, turns  # noqa: E402

HOLD = 1.5  # seconds a helper process holds its turn


class TurnsTest(unittest.TestCase):
    def setUp(self):
        folder = Path(tempfile.mkdtemp(prefix="dtl-turns-test-"))
        self.addCleanup(lambda: [p.unlink() for p in folder.iterdir()] and None or folder.rmdir())
        self.files = (folder / "lock", folder / "gate")
        real = (turns.LOCK_FILE, turns.GATE_FILE)
        turns.LOCK_FILE, turns.GATE_FILE = self.files
        self.addCleanup(lambda: setattr(turns, "LOCK_FILE", real[0]) or setattr(turns, "GATE_FILE", real[1]))

    def holder(self, turn: str, seconds: float = HOLD) -> subprocess.Popen:
        """A process that takes `turn` ("speed" or "work"), prints when it holds
        it and when it lets go (monotonic clock), holding it `seconds`."""
        code = ("import sys, time; sys.path.insert(0, 'grader'); from pathlib import Path\n"
                "from dtlgrade import turns\n"
                f"turns.LOCK_FILE, turns.GATE_FILE = Path({str(self.files[0])!r}), Path({str(self.files[1])!r})\n"
                f"with (turns.speed_turn(lambda _: None) if {turn!r} == 'speed' else turns.work_turn()):\n"
                "    print('held', time.monotonic(), flush=True); time.sleep(" + repr(seconds) + ")\n"
                "    print('released', time.monotonic(), flush=True)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=helpers.ROOT, stdout=subprocess.PIPE, text=True)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(proc.kill)
        return proc

    @staticmethod
    def times(proc: subprocess.Popen) -> tuple[float, float]:
        """When `proc` (holder()) held its turn, and when it let go."""
        out, _ = proc.communicate(timeout=30)
        said = dict(line.split() for line in out.splitlines())
        return float(said.get("held", getattr(proc, "held_at", "nan"))), float(said["released"])

    def wait_until_held(self, proc: subprocess.Popen) -> None:
        line = proc.stdout.readline().split()
        self.assertEqual(line[0], "held")
        proc.held_at = float(line[1])


class TestSpeedTurn(TurnsTest):
    def test_second_grading_waits(self):
        first = self.holder("speed")
        self.wait_until_held(first)
        said = []
        t0 = time.monotonic()
        with turns.speed_turn(said.append):
            waited = time.monotonic() - t0
        first.wait()
        self.assertGreater(waited, 0.5)
        self.assertIn("waiting for another grading's speed items", said[0])

    def test_speed_waits_for_work_in_flight(self):
        work = self.holder("work")
        self.wait_until_held(work)
        said = []
        with turns.speed_turn(said.append):
            got = time.monotonic()
        self.assertGreaterEqual(got, self.times(work)[1])
        self.assertIn("waiting for the commands other gradings are running to end", said[0])

    def test_work_waits_while_speed_is_measured(self):
        speed = self.holder("speed")
        self.wait_until_held(speed)
        with turns.work_turn():
            got = time.monotonic()
        self.assertGreaterEqual(got, self.times(speed)[1])

    def test_new_work_waits_behind_a_waiting_speed_item(self):
        # Work A runs; speed S asks (and waits for A); work B asks after S:
        # B must not start before S is done, even though A still held a work
        # turn when B asked (plain flock would let B in at once).
        a = self.holder("work")
        self.wait_until_held(a)
        s = self.holder("speed", seconds=0.5)
        time.sleep(0.5)  # S is at the gate by now, waiting for A
        b = self.holder("work", seconds=0.1)
        a_held, a_released = self.times(a)
        s_held, s_released = self.times(s)
        b_held, _ = self.times(b)
        self.assertGreaterEqual(s_held, a_released, "the speed item measured while work ran")
        self.assertGreaterEqual(b_held, s_released, "new work started before the waiting speed item had its turn")

    def test_commands_of_the_speed_turn_do_not_wait_for_it(self):
        done = threading.Event()

        def measure():
            with turns.speed_turn(lambda _: None):
                process.run_capped(["true"], dict(os.environ), Path.cwd(), 30)
                process.read_confined(["true"], Path.cwd(), 30)
            done.set()
        thread = threading.Thread(target=measure, daemon=True)
        thread.start()
        thread.join(20)
        self.assertTrue(done.is_set(), "a command inside the speed turn waited for the speed turn itself")



class TestLockFiles(unittest.TestCase):
    def test_the_same_for_every_tmpdir(self):
        code = "import sys; sys.path.insert(0, 'grader'); from dtlgrade import turns; print(turns.LOCK_FILE, turns.GATE_FILE)"
        seen = set()
        with tempfile.TemporaryDirectory(prefix="dtl-turns-tmpdir-") as own:
            for tmpdir in (tempfile.gettempdir(), own):
                out = subprocess.run([sys.executable, "-c", code], cwd=helpers.ROOT, capture_output=True,
                                     text=True, env=dict(os.environ, TMPDIR=tmpdir), check=True).stdout
                seen.add(out)
        self.assertEqual(len(seen), 1, seen)


if __name__ == "__main__":
    unittest.main()
