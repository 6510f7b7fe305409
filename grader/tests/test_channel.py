"""The grader's parsers take a run's files as hostile bytes and fail closed.

read_records() (dtlgrade/channel.py) is the only reader of a test run's results:
a record whose MAC does not check under the run's key, a sequence number out of
place, a line that is not a JSON object, an `end` record with no test, a status
it does not know, or more bytes than a run writes make the run untrusted (the
caller passes none of its tests). A last line without its newline, as a kill
leaves it, is dropped. read_untrusted() follows no link and opens no pipe (a
FIFO planted where a state file should be would otherwise block the grader);
trace_report() survives a non-numeric `since`. consistency_problem() checks the
run's world size and its exit status against the test main's own records.
Nothing here builds or runs a program: these are unit tests of the parsers.
"""
import hashlib
import hmac
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402,F401  (puts grader/ on sys.path)
from dtlgrade import channel  # noqa: E402
from dtlgrade.runner import consistency_problem, trace_report  # noqa: E402

KEY = bytes(range(32))


def sealed(record: dict, key: bytes = KEY) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"


def good_run() -> list[dict]:
    return [{"seq": 0, "event": "begin", "world_size": 2},
            {"seq": 1, "event": "start", "test": "Ring.A"},
            {"seq": 2, "event": "end", "test": "Ring.A", "status": "passed", "seconds": 0.1, "failures": ""},
            {"seq": 3, "event": "done", "exit": 0}]


class TestReadRecords(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.path = self.dir / "progress.jsonl"

    def read(self, data: bytes):
        self.path.write_bytes(data)
        return channel.read_records(self.path, KEY)

    def test_authentic_records_are_read(self):
        records, why = self.read(b"".join(sealed(r) for r in good_run()))
        self.assertIsNone(why)
        self.assertEqual(records, good_run())

    def test_forged_line_fails_closed(self):
        forged = b'{"event":"end","test":"Ring.B","status":"passed"}\n'
        records, why = self.read(b"".join(sealed(r) for r in good_run()[:2]) + forged)
        self.assertIn("MAC does not check", why)

    def test_wrong_key_fails_closed(self):
        _, why = self.read(b"".join(sealed(r, bytes(32)) for r in good_run()))
        self.assertIn("MAC does not check", why)

    def test_hostile_shapes_fail_closed(self):
        cases = {
            "end without a test": {"seq": 0, "event": "end", "status": "passed"},
            "not an object": [1, 2],
            "unknown status": {"seq": 0, "event": "end", "test": "A", "status": "PASSED"},
            "bool seq": {"seq": False, "event": "begin", "world_size": 1},
            "seq out of place": {"seq": 5, "event": "begin", "world_size": 1},
            "non-numeric seconds": {"seq": 0, "event": "end", "test": "A", "status": "passed", "seconds": "x"},
            "unknown event": {"seq": 0, "event": "pass", "test": "A"},
            "string exit": {"seq": 0, "event": "done", "exit": "0"},
            "row with a string counter": {"seq": 0, "event": "row", "name": "R/1", "error": None,
                                          "counters": {"ratio": "0.1"}},
            "row without counters": {"seq": 0, "event": "row", "name": "R/1", "error": None},
        }
        for what, record in cases.items():
            with self.subTest(what):
                body = json.dumps(record).encode()
                line = hmac.new(KEY, body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"
                records, why = self.read(line)
                self.assertIsNotNone(why, what)
                self.assertEqual(records, [])

    def test_benchmark_row_is_read(self):
        row = {"seq": 0, "event": "row", "name": "RingShift/4 MiB", "error": None, "counters": {"ratio": 1.25}}
        records, why = self.read(sealed(row))
        self.assertIsNone(why)
        self.assertEqual(records, [row])

    def test_replayed_record_fails_closed(self):
        run = good_run()
        _, why = self.read(b"".join(sealed(r) for r in run[:3]) + sealed(run[2]))
        self.assertIn("sequence number", why)

    def test_binary_garbage_fails_closed(self):
        _, why = self.read(b"\xff\xfe\x00 {not json}\n")
        self.assertIsNotNone(why)

    def test_line_cut_by_a_kill_is_dropped(self):
        data = b"".join(sealed(r) for r in good_run()[:2]) + sealed(good_run()[2])[:-10]
        records, why = self.read(data)
        self.assertIsNone(why)
        self.assertEqual(len(records), 2)

    def test_oversized_file_fails_closed(self):
        with open(self.path, "wb") as f:
            f.truncate(channel.RECORDS_CAP + 10)
        _, why = channel.read_records(self.path, KEY)
        self.assertIn("more than", why)

    def test_missing_file_is_no_records(self):
        self.assertEqual(channel.read_records(self.dir / "none", KEY), ([], None))

    def test_links_and_pipes_are_not_followed(self):
        target = self.dir / "elsewhere"
        target.write_bytes(b"".join(sealed(r) for r in good_run()))
        os.symlink(target, self.path)
        self.assertEqual(channel.read_records(self.path, KEY), ([], None))
        fifo = self.dir / "fifo"
        os.mkfifo(fifo)
        self.assertIsNone(channel.read_untrusted(fifo, 100))  # returns at once, no writer needed


class TestTraceReport(unittest.TestCase):
    def test_hostile_state_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp)
            (trace / "rank0.state").write_text("state blocked\ncall MPI_Send\nsince not-a-number\n")
            os.mkfifo(trace / "rank1.state")
            (trace / "rank2.state").write_bytes(b"\xff\x00state running\n")
            text = trace_report(trace, 3)
        self.assertIn("rank 0: in MPI_Send for an unknown time", text)
        self.assertIn("rank 1: no trace", text)


class TestConsistency(unittest.TestCase):
    def test_exit_status_and_world_size(self):
        run = good_run()
        self.assertIsNone(consistency_problem(run, 2, 0, False))
        self.assertIn("not 3", consistency_problem(run, 3, 0, False))
        self.assertIn("ended with 1", consistency_problem(run, 2, 1, False))
        failed = run[:2] + [dict(run[2], status="failed"), run[3]]
        self.assertIn("does not match", consistency_problem(failed, 2, 0, False))
        # A crash before `done`: the tests that ended keep their results.
        self.assertIsNone(consistency_problem(run[:3], 2, 134, False))


if __name__ == "__main__":
    unittest.main()
