"""The grader's end of the authenticated result channel, and reading files a run wrote.

A test run's results are the records its test main appends to the progress file,
each `HMAC_HEX {"seq":N,...}` under a key made fresh for the run (See Note [Results
the grader can trust] in harness/testing/result_channel.cc for the whole design and
why the code under test cannot get the key). KeyHandover makes the key, hands it
to rank 0's test main over a named pipe written once and unlinked at once, and then
opens the gate the other ranks wait at. read_records() takes the file's bytes as
hostile: a record that does not check, a sequence number out of place, a line that
is not a JSON object of the expected shape, or more bytes than any run writes make
the whole run untrusted (it fails closed: the caller passes none of its tests).

read_untrusted() is how the grader reads any file a run could have written or
replaced (the progress file, the tracer's state files): no symbolic links, no
pipes or devices (a FIFO would block the grader), at most `cap` bytes.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
import threading
import time
from pathlib import Path

RECORDS_CAP = 8 << 20      # bytes of progress records read at most; a run writes far less
EVENTS = {"begin", "start", "end", "timeout", "done", "row"}
STATUSES = {"passed", "failed", "skipped"}


def read_untrusted(path: Path, cap: int) -> bytes | None:
    """At most `cap` bytes of the regular file `path`, or None when it is missing or
    is anything else (a link, a pipe, a device, a folder)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


class KeyHandover:
    """`with KeyHandover(run_dir, tests) as key:` around one run. env() names the two
    pipes for the run's environment; handed() says whether the key was read."""

    def __init__(self, run_dir: Path, tests: list[str]):
        self.key = secrets.token_bytes(32)
        self.key_pipe = run_dir / "result.key"
        self.gate_pipe = run_dir / "result.gate"
        # The tests to run travel with the key: argv is the submission's to rewrite.
        self._payload = (self.key.hex() + "\n" + ":".join(tests) + "\n").encode()
        self._stop = threading.Event()
        self._handed = threading.Event()
        self._gate_fd: int | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def env(self) -> dict[str, str]:
        return {"DTL_RESULT_KEY": str(self.key_pipe), "DTL_RESULT_GATE": str(self.gate_pipe)}

    def handed(self) -> bool:
        return self._handed.is_set()

    def __enter__(self) -> "KeyHandover":
        os.mkfifo(self.key_pipe, 0o600)   # fails if anything is there already: never reuse a path
        os.mkfifo(self.gate_pipe, 0o600)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._gate_fd is not None:
            os.close(self._gate_fd)
        for pipe in (self.key_pipe, self.gate_pipe):
            try:
                pipe.unlink()
            except OSError:
                pass

    def _serve(self) -> None:
        # Wait for the first reader: rank 0's test main, before any code of the lab
        # runs (the other ranks wait at the gate, opened below).
        fd = None
        while not self._stop.is_set():
            try:
                fd = os.open(self.key_pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.EINTR):
                    return
                time.sleep(0.005)
        if fd is None:
            return
        try:
            self.key_pipe.unlink()        # nobody opens it again
            os.set_blocking(fd, True)
            view = memoryview(self._payload)
            while view:
                view = view[os.write(fd, view):]
            self._handed.set()
        except OSError:
            return                         # the reader went away: no key, no trusted result
        finally:
            os.close(fd)
        # O_RDWR on a pipe never blocks, and keeps it open for every rank that arrives later.
        self._gate_fd = os.open(self.gate_pipe, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)


def _check_record(record: object, seq: int) -> str | None:
    """Why a checked record is malformed, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("seq") != seq or isinstance(record.get("seq"), bool):
        return f"sequence number {record.get('seq')!r} where {seq} was due"
    event = record.get("event")
    if event not in EVENTS:
        return f"unknown event {event!r}"
    if event in ("start", "end", "timeout") and not isinstance(record.get("test"), str):
        return f"a {event} record without a test name"
    if event == "end":
        if record.get("status") not in STATUSES:
            return f"status {record.get('status')!r}"
        if not isinstance(record.get("seconds", 0), (int, float)) or not isinstance(record.get("failures", ""), str):
            return "malformed seconds or failures"
    if event == "timeout" and not isinstance(record.get("report", ""), str):
        return "malformed report"
    if event == "row":  # a benchmark row (harness/bench/bench_mpi_main.cc)
        counters = record.get("counters")
        if not isinstance(record.get("name"), str) or not isinstance(counters, dict) or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in counters.values()) or \
                not isinstance(record.get("error"), (str, type(None))):
            return "malformed benchmark row"
    if event == "begin" and not isinstance(record.get("world_size"), int):
        return "malformed world size"
    if event == "done" and (not isinstance(record.get("exit"), int) or isinstance(record.get("exit"), bool)):
        return "malformed exit status"
    return None


def read_records(path: Path, key: bytes) -> tuple[list[dict], str | None]:
    """The authenticated records in `path` and None, or (the records before the
    first bad one, why the run cannot be trusted). A last line without its newline
    (cut short by a kill) is dropped, not held against the run."""
    data = read_untrusted(path, RECORDS_CAP + 1)
    if data is None:
        return [], None
    if len(data) > RECORDS_CAP:
        return [], f"the progress file holds more than {RECORDS_CAP >> 20} MiB"
    lines = data.split(b"\n")
    lines.pop()  # b"" after the last newline, or a line cut short
    records: list[dict] = []
    for i, line in enumerate(lines):
        mac, _, body = line.partition(b" ")
        expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            return records, f"line {i + 1} of the progress file is not a record of the test main (its MAC does not check)"
        try:
            record = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return records, f"record {i} is not JSON"
        why = _check_record(record, i)
        if why is not None:
            return records, f"record {i}: {why}"
        records.append(record)
    return records, None
