"""Running a lab's test binaries under mpirun and reading their results.

run_items() lists the tests of each binary, groups the rubric items' tests by
(binary, rank count) and runs the groups: ranks 2 and up first, then 1, and a
test that hung or flooded at one rank count is not run again at the next.
run_tests() runs one group, one test after another, each with its own timeout
(the test main's watchdog), and starts a new run after a crash, a timeout or a
flood until every test has a result. Results come only from the progress file's
records, each authenticated with a key made for the run (channel.py; See Note
[Results the grader can trust]), never from what the program prints or from a
file it could forge (gtest's JSON is not read). A run whose records do not all
check, or whose exit status is not the one its test main reported, passes none
of its tests. The expected tests come from the course's own build (the
reference's test program, listed before any submitted code runs), not from the
program under test. A run the grader had to kill gets the tracer's report of
where each rank was (trace_report()), and passes none of its tests. An
Allowance bounds the whole: the lab's time budget (no run starts after it), and
after a test program's second deadlock its remaining tests get a short timeout
(a correct test takes well under a second; each further hang costs seconds, not
a full timeout). Not "not run": a deadlocking ring must not cost the halo items.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from . import progress
from .channel import KeyHandover, read_records, read_untrusted
from .lab import Item
from .process import OUTPUT_FLOOD_BYTES, run_mpi


DEADLOCKS_PER_BINARY = 2   # after this many, a test program's remaining tests get...
FOLLOWUP_TIMEOUT = 5.0     # ...this many seconds each (or their own timeout, if shorter)


@dataclass
class TestResult:
    status: str          # passed, failed, skipped, timeout, crashed, flood, not_run
    message: str = ""
    seconds: float = 0.0


@dataclass
class Allowance:
    """What a lab's test runs may still spend: until `deadline` (monotonic clock; the
    rubric's `budget` seconds from the first run) and, per test program, how many
    of its tests deadlocked or timed out (from DEADLOCKS_PER_BINARY on, the
    program's tests get FOLLOWUP_TIMEOUT seconds each)."""
    budget: float
    deadline: float
    deadlocks: dict[str, int] = field(default_factory=dict)

    @classmethod
    def starting_now(cls, budget: float) -> "Allowance":
        return cls(budget, time.monotonic() + budget)

    def refusal(self) -> str | None:
        """Why no further run is started, or None."""
        if time.monotonic() > self.deadline:
            return f"not run: the lab's time budget of {self.budget:g} s for test runs was spent"
        return None

    def timeout(self, kind: str, own: float) -> float:
        """The timeout a test of program `kind` runs with (its own is `own`)."""
        return min(own, FOLLOWUP_TIMEOUT) if self.shortened(kind) else own

    def shortened(self, kind: str) -> bool:
        return self.deadlocks.get(kind, 0) >= DEADLOCKS_PER_BINARY


def trace_report(trace_dir: Path, np: int) -> str:
    """Where each rank is, from the tracer's state files (grader-side timeout)."""
    lines = []
    now = time.time()
    for r in range(np):
        state = {}
        # Written by the run: read as hostile (no links or pipes, a size cap, any text).
        data = read_untrusted(trace_dir / f"rank{r}.state", 64 << 10)
        for line in (data or b"").decode(errors="replace").replace("\0", "").splitlines():
            key, _, value = line.partition(" ")
            state[key] = value[:200]
        if state.get("state") in ("blocked", "polling"):
            try:
                waited = f"{now - float(state.get('since', now)):.1f} s"
            except ValueError:
                waited = "an unknown time"
            lines.append(f"  rank {r}: in {state.get('call', '?')} for {waited}")
        elif state.get("state") == "running":
            lines.append(f"  rank {r}: running its own code, not in an MPI call (last call: {state.get('last', '-')})")
        else:
            lines.append(f"  rank {r}: no trace")
    return "\n".join(lines)


def consistency_problem(events: list[dict], np: int, returncode: int | None, killed: bool) -> str | None:
    """Why authenticated records still do not add up, or None: the run must be the
    one asked for (its world size), and a run that reports its end must exit with
    the status it reported, which must say whether a test failed."""
    begin = next((e for e in events if e["event"] == "begin"), None)
    if begin is not None and begin["world_size"] != np:
        return f"the test main ran at {begin['world_size']} rank(s), not {np}"
    done = next((e for e in events if e["event"] == "done"), None)
    if done is None or killed:
        return None  # a crash or a kill: the tests that ended before it keep their results
    if returncode != done["exit"]:
        return f"the test main reported exit status {done['exit']}, the program ended with {returncode}"
    failed = any(e["event"] == "end" and e["status"] == "failed" for e in events)
    if failed != (done["exit"] != 0):
        return f"exit status {done['exit']} does not match the tests' results"
    return None


def list_tests(binary: Path, patterns: list[str], work: Path) -> tuple[list[str], str]:
    """The test names in `binary`, and the listing's output (shown when there are none:
    a submission can crash the program before main, e.g. in a static initializer)."""
    result = run_mpi(["-n", "1", str(binary), "--gtest_list_tests", f"--gtest_filter={':'.join(patterns)}"],
                     work, 120)
    names, suite = [], ""
    for line in result.output.splitlines():
        if not line.strip() or line.startswith(("[", "Note:", "Running main")):
            continue
        # Typed and parameterized tests carry "  # TypeParam = ..." comments.
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names, result.output


def run_tests(binary: Path, np: int, names: list[str], timeouts: dict[str, float], work: Path,
              log, allowance: Allowance | None = None, kind: str = "test") -> dict[str, TestResult]:
    """Runs `names` at `np` ranks, each with its own timeout (the test main's
    watchdog), resuming after a crash, a timeout or a flood, until every test
    has a result or the allowance refuses another run."""
    results: dict[str, TestResult] = {}
    remaining = list(names)
    while remaining:
        refused = allowance.refusal() if allowance is not None else None
        if refused is not None:
            results.update({name: TestResult("not_run", refused) for name in remaining})
            break
        shortened = allowance is not None and allowance.shortened(kind)
        timeouts = {n: allowance.timeout(kind, t) for n, t in timeouts.items()} if allowance else timeouts
        default = min(timeouts[n] for n in remaining)
        overrides = ",".join(f"{n}={timeouts[n]:g}" for n in remaining if timeouts[n] != default)
        run_dir = Path(tempfile.mkdtemp(prefix=f"np{np}-", dir=work))
        trace_dir = run_dir / "trace"
        trace_dir.mkdir()
        progress = run_dir / "progress.jsonl"
        handover = KeyHandover(run_dir, remaining)
        env = dict(DTL_PROGRESS_FILE=str(progress), DTL_TRACE_DIR=str(trace_dir),
                   DTL_TEST_TIMEOUT=f"{default:g}", DTL_TEST_TIMEOUTS=overrides, GTEST_COLOR="no",
                   **handover.env())
        args = ["--oversubscribe", "--bind-to", "none", "-n", str(np), str(binary),
                f"--gtest_filter={':'.join(remaining)}"]
        limit = sum(timeouts[n] for n in remaining) + 60
        if allowance is not None:  # never far past the lab's budget
            limit = min(limit, max(30.0, allowance.deadline - time.monotonic() + 30.0))
        report = {}
        with handover:
            run = run_mpi(args, run_dir, limit, env,
                          on_timeout=lambda: report.update(text=trace_report(trace_dir, np)))
        log(run.output)
        events, untrusted = read_records(progress, handover.key)
        if untrusted is None:
            untrusted = consistency_problem(events, np, run.returncode, run.timed_out or run.flooded)
        if untrusted is not None:
            # Forged or damaged results: the run passes none of its tests, and is not resumed.
            why = (f"REFUSED: the results of this run could not be authenticated ({untrusted}). "
                   "Results come only from the test main's authenticated records; a run whose "
                   "records were tampered with passes no test.")
            for name in remaining:
                results[name] = TestResult("failed", why)
            break
        finished = {}
        for e in events:  # every test that ended, in this run
            if e["event"] == "end" and e["test"] in remaining and e["test"] not in finished:
                finished[e["test"]] = TestResult(e["status"], e.get("failures", ""), float(e.get("seconds", 0)))
        started = [e["test"] for e in events if e["event"] == "start"]
        culprit = next((t for t in reversed(started) if t not in finished), None)
        if culprit is not None:
            timeout_event = next((e for e in events if e["event"] == "timeout" and e["test"] == culprit), None)
            tail = run.output[-2500:]
            if timeout_event is not None:
                why = (f"(this program had deadlocked {DEADLOCKS_PER_BINARY} times already, so its remaining "
                       f"tests got {FOLLOWUP_TIMEOUT:g} s each)\n" if shortened else "")
                finished[culprit] = TestResult("timeout", why + timeout_event.get("report", ""), timeouts[culprit])
            elif run.flooded:
                finished[culprit] = TestResult(
                    "flood", f"{culprit} printed more than {OUTPUT_FLOOD_BYTES >> 20} MiB of output; "
                             f"the run was stopped. The end of it:\n{tail}")
            elif run.timed_out:
                finished[culprit] = TestResult(
                    "timeout", f"TIMEOUT in {culprit}: the run was killed by the grader after "
                               f"{limit:.0f} s. Where each rank was:\n{report.get('text', '')}")
            else:
                finished[culprit] = TestResult(
                    "crashed", f"{culprit} crashed (mpirun exit code {run.returncode}): a rank died, "
                               f"e.g. a segmentation fault or an abort. The end of the output:\n{tail}")
        elif run.timed_out or run.flooded:
            # Every test of the run ended, yet the run had to be stopped (something
            # it started kept it alive, or it flooded after its tests): a killed
            # run passes none of its tests.
            why = "flooded its output" if run.flooded else f"did not end and was killed after {limit:.0f} s"
            for name, result in finished.items():
                if result.status == "passed":
                    finished[name] = TestResult(
                        "failed", f"the run of {name} {why}, after its tests had ended (a process left behind "
                                  "by the code under test?): a killed run passes no test")
        if allowance is not None:
            allowance.deadlocks[kind] = allowance.deadlocks.get(kind, 0) + sum(
                1 for name in remaining if name in finished and finished[name].status == "timeout")
        for name in remaining:
            if name in finished:
                results[name] = finished[name]
        progress_made = [n for n in remaining if n in finished]
        remaining = [n for n in remaining if n not in finished]
        if remaining and not progress_made:
            # The binary died before any test started (e.g. in a static initializer).
            for name in remaining:
                results[name] = TestResult("crashed", "the test program ended before this test started "
                                                      f"(exit code {run.returncode}):\n{run.output[-2500:]}")
            break
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


def run_items(items: list[Item], binaries: dict[str, str], exe_dir: Path, work: Path, log,
              allowance: Allowance | None = None, listers: dict[str, str] | None = None):
    """Runs the tests of `items` (all runnable here) in the binaries `binaries`
    (kind -> file in `exe_dir`), within `allowance`. The tests expected of each
    kind are those `listers[kind]` lists (the reference's program of that kind:
    course code only, listed before any submitted code runs); `binaries[kind]`
    itself only where there is no lister (a repository without reference/).
    Returns (results, names, listing): the result of each test by (kind, ranks),
    the test names each kind lists, and the output of each listing."""
    listers = listers or {}
    listed = {kind: list_tests(exe_dir / listers.get(kind, exe), ["*"], work) for kind, exe in binaries.items()}
    names = {kind: found for kind, (found, _) in listed.items()}
    listing = {kind: output for kind, (_, output) in listed.items()}
    # (binary, ranks) -> {test: its timeout, the largest of the items naming it}
    plan: dict[tuple[str, int], dict[str, float]] = {}
    for item in items:
        matched = {n for n in names[item.binary] if any(fnmatchcase(n, p) for p in item.tests)}
        for np in item.ranks:
            group = plan.setdefault((item.binary, np), {})
            for n in matched:
                group[n] = max(group.get(n, 0.0), item.timeout)
    by_run: dict[tuple[str, int], dict[str, TestResult]] = {}
    hung: dict[tuple[str, str], tuple[int, str]] = {}  # (binary, test) -> (ranks, status)
    # Several ranks before one: a hang is first met (and reported, with every
    # rank's blocked call) where it is most instructive, and not re-run after.
    for (kind, np), tests in sorted(plan.items(), key=lambda kv: (kv[0][0], kv[0][1] == 1, kv[0][1])):
        # A test that hung or flooded at fewer ranks is not run again: it fails
        # its item anyway, and each further run would cost a full timeout.
        ordered = [n for n in names[kind] if n in tests and (kind, n) not in hung]
        t0 = time.monotonic()
        with progress.status(f"running {kind} at {np} rank(s): {len(ordered)} tests"):
            by_run[(kind, np)] = run_tests(exe_dir / binaries[kind], np, ordered, tests, work, log, allowance, kind)
        for n, r in by_run[(kind, np)].items():
            if r.status in ("timeout", "flood"):
                hung.setdefault((kind, n), (np, r.status))
        for n in tests:
            if (kind, n) in hung and n not in by_run[(kind, np)]:
                at, status = hung[(kind, n)]
                what = "timed out" if status == "timeout" else "flooded its output"
                by_run[(kind, np)][n] = TestResult(status, f"not run: it {what} at {at} rank(s)")
        ordered = [n for n in names[kind] if n in tests]
        bad = sum(r.status != "passed" for r in by_run[(kind, np)].values())
        print(f"  {kind:<6} at {np} rank(s): {len(ordered) - bad}/{len(ordered)} passed "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
    return by_run, names, listing


def gpu_available() -> bool:
    """Whether this machine has a GPU to run GPU items on (`nvidia-smi -L` lists one)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        return out.returncode == 0 and "GPU" in out.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False

