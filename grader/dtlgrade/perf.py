"""Performance items: the submission's benchmark beside the reference's, fairly.

For each [[perf]] item, perf_rows() first decides at how many ranks it can run
here: usable_cores() reads the cores this grader may use (its CPU affinity and
any cgroup CPU quota) and fit_ranks() picks the item's rank count, or another
one the rubric allows (`ranks_allowed`), with a core for every rank; an item
that fits nowhere is "not gradable here", out of the total, with the reason.

score_perf() then measures it in pairs: each pair runs the reference, the
submission and the reference again, back to back (bench_value() is one run of
one row, which repeats the row REPETITIONS times and gives their median). The
submission's ratio in a pair is its value over the geometric mean of the two
reference runs around it; the two reference runs, the reference
against itself, measure the machine's noise. judge() decides from both; see
Note [Noise guard]. A run whose ranks waited for a CPU too long (another
process held the cores) is void and leaves the item out at once (Note [Ranks
kept from their cores]). A noisy machine can only make an item "too noisy to
grade speed here" (out of the total), never cost the submission points. Pairs that
already decide end the measuring early (Note [Early stop]); the report gives
the median ratio with its interval (median_interval()).

A speed item measures with the machine to itself: it holds the speed turn
(turns.py), so no other grading's build or run goes on beside it, and a batch
grades the speed items after every submission's correctness runs (grading.py).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .channel import KeyHandover, read_records
from .lab import Lab, PerfItem
from .process import run_mpi
from .turns import speed_turn

NOT_GRADABLE_HERE = "not gradable here"
TOO_NOISY = "too noisy to grade speed here"

# Note [Noise guard]
# ~~~~~~~~~~~~~~~~~~
# A loaded machine (a build beside the grader, several gradings at once, more
# ranks than cores) slows runs at random, and a ratio of two random runs can be
# anything: on 2 busy cores the reference against itself once scored a median
# ratio of 1.91 and lost points (issue 31). So each pair is three runs, reference
# R1, submission S, reference R2, back to back:
#
#   ratio  q = S / sqrt(R1 * R2)    the submission against the reference around it
#   spread n = max(R2/R1, R1/R2)    the reference against itself, >= 1
#
# The reference runs on both sides of the submission: a steady drift of the
# machine, or whatever a run does to the next, falls on the mean of R1 and R2
# as much as on S (this replaces pairs of two runs whose order alternated, which
# needed many pairs to cancel a drift and could not see the noise). The pairs'
# n are the reference graded against itself on this machine just now, so they
# say how slow the reference could look: taking each n and 1/n as the ratio of
# one such pair, noise_bound() is the smallest B such that the median of as
# many pairs comes above B less than once in a thousand (exactly, by counting;
# with 5 pairs B is the largest n, and a single wild pair weighs less as pairs
# are added). judge() then reads the median of the q (the lower middle of an
# even count):
#
#   - at or below full_at: full points; noise cannot cost points. Unless the
#     interval of that median (median_interval(): from the pairs alone, the
#     sign test's order statistics) reaches zero_at: then the pairs do not say
#     whether this submission earns full points or none. The grader's own test
#     once saw it: a ring shift 10x slower than the reference, measured beside
#     a load that swung every run several fold, came out at a median of 1.19
#     with pairs from 0.32 to 6.91, and took full points. That is "too noisy to
#     grade speed here" at once, without more pairs: measuring on until the
#     median looked slow would give the reference, whose median was below
#     full_at, more chances to lose points (simulated: 1 grading in 300 at the
#     noisiest). So this rule only ever turns full points into "too noisy";
#     a reference with steady pairs (issue 31's: 1.34 to 1.47) keeps them;
#   - above full_at * B: slower than the reference could look against itself
#     here: scored as measured;
#   - in between: the reference itself could look this slow here, so this says
#     nothing yet. More pairs, up to max_runs; then "too noisy to grade speed
#     here", out of the total, never a lower score.
#
# Simulated (noise the same for all three runs: mixtures of quiet and busy runs,
# rare 4x outliers, heavy tails), the reference scores below full about once in
# a thousand gradings at the noisiest (half the runs off by a factor of 2), less
# elsewhere; a submission 10x slower, like the slow ring shift of the grader's
# tests, is then "too noisy" in about 1 grading in 100, one 3.5x slower in 2 in 5
# at the noisiest and 1 in 15 with rare outliers. With B the largest n over all
# the pairs (no counting) the 10x slower one was "too
# noisy" in 1 grading in 6. The interval check above costs the reference "too
# noisy" in 2 gradings in 100 where a third of the runs are off by 1.6x (none
# without it) and in 1 in 4 at the noisiest (1 in 100 without it); in return, a
# submission 3.5x slower took full points in 13 gradings of 600 at the
# noisiest without it and in none with it, one 2x slower in 76 instead of 186
# (test_perf_fairness.py, with the rubrics' early stop).


# ---------------------------------------------------------------------------
# The cores this grader may use

def _mount_points(mountinfo: str) -> dict[str, Path]:
    """{"cgroup2": its mount point, "cpu": cgroup v1's cpu controller's} from /proc/self/mountinfo."""
    found: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        if rest[0] == "cgroup2":
            found.setdefault("cgroup2", Path(fields[4]))
        elif rest[0] == "cgroup" and "cpu" in rest[2].split(","):
            found.setdefault("cpu", Path(fields[4]))
    return found


def cgroup_cpu_quota(proc_cgroup: str, mountinfo: str, root: Path = Path("/")) -> tuple[float | None, str]:
    """The CPU quota, in cores, of the cgroup this process is in and its ancestors
    (the smallest); (None, why) when there is none. v2: cpu.max ("QUOTA PERIOD" or
    "max PERIOD"); v1: cpu.cfs_quota_us / cpu.cfs_period_us (-1: none). `root`
    prefixes every path (tests)."""
    mounts = _mount_points(mountinfo)
    quotas: list[tuple[float, str]] = []
    for line in proc_cgroup.splitlines():
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "" and "cgroup2" in mounts:
            files, mount = ("cpu.max",), mounts["cgroup2"]
        elif "cpu" in controllers.split(",") and "cpu" in mounts:
            files, mount = ("cpu.cfs_quota_us", "cpu.cfs_period_us"), mounts["cpu"]
        else:
            continue
        folder = root / mount.relative_to("/") / path.strip("/")
        top = root / mount.relative_to("/")
        while True:
            try:
                texts = [(folder / f).read_text().split() for f in files]
                if len(files) == 1 and texts[0][0] != "max":
                    quotas.append((int(texts[0][0]) / int(texts[0][1]), str(folder / files[0])))
                elif len(files) == 2 and int(texts[0][0]) > 0:
                    quotas.append((int(texts[0][0]) / int(texts[1][0]), str(folder / files[0])))
            except (OSError, ValueError, IndexError, ZeroDivisionError):
                pass
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent
    if not quotas:
        return None, "no cgroup CPU quota"
    cores, where = min(quotas)
    return cores, f"cgroup CPU quota {cores:g} cores ({where})"


def usable_cores() -> tuple[int, str]:
    """(how many cores this grader may use, a sentence saying how it knows): the
    CPUs of its affinity mask, fewer when a cgroup quota allows less (a quota of
    1.5 cores gives each rank a core of its own only once)."""
    affinity = len(os.sched_getaffinity(0))
    try:
        quota, why = cgroup_cpu_quota(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    except OSError:
        quota, why = None, "no cgroup information"
    cores = affinity if quota is None else max(1, min(affinity, math.floor(quota + 1e-9)))
    return cores, f"{cores} usable core(s): {affinity} CPU(s) in the grader's affinity mask, {why}"


def fit_ranks(item: PerfItem, cores: int) -> int | None:
    """The rank count `item` runs at on `cores` cores: its own `ranks` when every
    rank gets a core, else the largest of its `ranks_allowed` that fits; None when
    none does (the item is not gradable here)."""
    if item.ranks <= cores:
        return item.ranks
    fitting = [r for r in item.ranks_allowed if r <= cores]
    return max(fitting) if fitting else None


# ---------------------------------------------------------------------------
# Measuring

# How many times one benchmark run repeats the row (Google Benchmark's
# --benchmark_repetitions; the run's value is then the median of its
# repetitions). A run costs its program start-up (mpirun and MPI_Init of every
# rank: about 0.5 s on the 2-core machine) and then its messages. On a quiet
# machine a repetition of a 4 MiB row adds some 50 ms; on a loaded one every
# message waits for both ranks to be scheduled, and with 3 repetitions lab 01's
# speed item took 203 s for 9 runs at load average 11 on 2 cores (1 repetition:
# see grader/README.md). More repetitions buy little that more pairs do not,
# and cost most where the machine is slowest: 1.
REPETITIONS = 1
AGGREGATES = ("_mean", "_median", "_stddev", "_cv")  # Google Benchmark's rows over the repetitions


def row_value(rows: list[dict], item: PerfItem) -> tuple[float | None, str]:
    """The value of `item`'s counter in one run's authenticated records: the median
    over the row's repetitions (Google Benchmark's own aggregate rows left aside);
    None and why when the row is missing or reported an error."""
    values = []
    for r in rows:
        if r["event"] != "row" or not re.match(f"^{re.escape(item.bench)}(/|$)", r["name"]):
            continue
        if r["name"].endswith(AGGREGATES):
            continue
        if r["error"] is not None:
            return None, f"{item.bench}: {r['error'] or 'error'}"
        if item.counter in r["counters"]:
            values.append(float(r["counters"][item.counter]))
    if not values:
        return None, ""
    return statistics.median_low(values), ""


# Note [Ranks kept from their cores]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# fit_ranks() gives every rank a core of its own on paper: it counts the cores
# in the grader's affinity mask and quota. Another process can still take them.
# The grader's test saw it on a 2-core CI machine: its spinning process got 94%
# of one core, so the two ranks shared the other, and a ring shift with 60
# extra copies of its 4 MiB message measured 1.12 of the reference, with pairs
# as steady as the reference's own (0.71 to 1.14): full points, and no noise to
# see. Reproduced here with both ranks on one core: MPI_Sendrecv of 4 MiB took
# 350 ms instead of 1 (each fragment waits for the scheduler to switch ranks),
# every iteration alike, and that ring shift, 27x slower on its own cores,
# measured 1.10, by the median or by the minimum over iterations. No statistic
# recovers the code's speed from such runs, so the grader measures what the
# ranks were denied rather than guess it from the times.
#
# The kernel counts, for every thread, the time it was ready to run and waited
# for a CPU (the second field of /proc/PID/schedstat, the run delay); sleeping
# or blocking in a system call is not waiting. RankWaits samples it for the
# benchmark's processes (descendants of the grader with the binary's name: the
# ranks' main threads) while a run goes on. A rank that waited for more than
# MAX_CPU_WAIT of its time after start-up did not have a core of its own.
#
# Only the reference's runs judge the machine. When one of them was kept from
# its cores, the pair does not count and is measured again; at the second such
# pair the item is "too noisy to grade speed here", out of the total, for every
# submission alike (a spinner that stays, as on the CI machine, costs two runs).
# A submission's own run is measured as it ran, however long its ranks waited:
# its threads or its CPU affinity can starve its ranks, and that must cost it
# speed, not take the item out of its total; a load that came from outside shows
# in the reference runs on both sides of it. Items whose counter no scheduler
# changes (bytes) say `timed = false` and are never judged.
#
# Measured (the reference's speed rows of labs 01 and 03-08, 2 cores, 3 runs
# each; labs 02 and 09 need 3 cores): on a quiet machine the ranks waited at
# most 14% (lab 03, whose ranks' progress threads share their cores; labs 04-08
# at most 2.5%); with the tests' spinner beside them (UNDER_LOAD, 80-98% of a
# core), 33-70% in the rows that compute or poll (labs 01, 03, 07, 08: lab 07's
# step took 2.3x as long) and 4-14% in those that sleep on an emulated link
# (labs 04-06, still graded, the noise guard judging their ratios).
# MAX_CPU_WAIT lies between.

MAX_CPU_WAIT = 0.25      # of a rank's time after its start-up: more, and the run timed the scheduler
STARTUP_SECONDS = 0.2    # a rank's first moments (MPI_Init, beside mpirun and its sibling starting), not counted
MAX_VOIDED_PAIRS = 2     # pairs whose reference run was kept from its cores: at the second, the item is left out
WAIT_SAMPLE_SECONDS = 0.05


class KeptFromCores(Exception):
    """A benchmark run whose ranks waited for a CPU too long to measure anything
    (Note [Ranks kept from their cores]); the message says how long, and `result`
    is what the run measured all the same (bench_value()'s value and why)."""

    def __init__(self, message: str, value: float | None = None, why: str = ""):
        super().__init__(message)
        self.result = (value, why)


class RankWaits:
    """Samples the run delay of the processes named `name` that descend from this
    one, every WAIT_SAMPLE_SECONDS on a thread of its own, while the `with` block
    runs (Note [Ranks kept from their cores])."""

    def __init__(self, name: str, ranks: int | None = None, proc: Path = Path("/proc")):
        self.comm = name[:15]  # the kernel keeps 15 characters of a process's name
        self.ranks = ranks     # once this many are seen, only they are read (a look at every process costs ~1 ms)
        self.proc = proc
        # pid -> (first seen, (time, wait) at the window's start, (time, wait) last seen), seconds
        self.seen: dict[int, tuple[float, tuple[float, float] | None, tuple[float, float] | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RankWaits":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(WAIT_SAMPLE_SECONDS):
                return

    def sample(self) -> None:
        """One reading of every rank's wait (the ranks found by _find() until
        `ranks` of them are seen, then only those read)."""
        found = self.ranks is not None and len(self.seen) >= self.ranks
        for pid in list(self.seen) if found else self._find():
            try:
                wait = int((self.proc / str(pid) / "schedstat").read_text().split()[1]) / 1e9  # ns
            except (OSError, ValueError, IndexError):
                continue  # gone
            now = time.monotonic()
            first, start, _ = self.seen.get(pid, (now, None, None))
            if start is None and now - first >= STARTUP_SECONDS:
                start = (now, wait)
            self.seen[pid] = (first, start, (now, wait) if start is not None else None)

    def _find(self) -> list[int]:
        """The processes named like the benchmark that descend from this one."""
        parents, names = {}, {}
        for stat in self.proc.glob("[0-9]*/stat"):
            try:
                head, rest = stat.read_text().rsplit(")", 1)
                pid = int(stat.parent.name)
                parents[pid], names[pid] = int(rest.split()[1]), head.split("(", 1)[1]
            except (OSError, ValueError, IndexError):
                continue
        me = os.getpid()
        return [pid for pid, name in names.items() if name == self.comm and descends(pid, me, parents)]

    def worst(self, min_seconds: float = 0.1) -> tuple[float, float]:
        """(the largest share of its time after start-up that a rank waited for a
        CPU, the seconds that share is of), over the ranks seen for at least
        `min_seconds` after their start-up; (0, 0) when none was."""
        shares = [((last[1] - start[1]) / (last[0] - start[0]), last[0] - start[0])
                  for _, start, last in self.seen.values()
                  if start is not None and last[0] - start[0] >= min_seconds]
        return max(shares, default=(0.0, 0.0))


def descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    """Whether `ancestor` is above `pid` in `parents` (pid -> its parent's pid)."""
    for _ in range(64):
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def bench_value(binary: Path, item: PerfItem, ranks: int, work: Path, log) -> tuple[float | None, str]:
    """One run of one benchmark row at `ranks` ranks, REPETITIONS times over; returns
    (the counter's value, or None, and why not). The value comes from the row's
    records sealed with the run's key (channel.py), not from --benchmark_out, which
    the code under test could rewrite. Raises KeptFromCores, carrying that result,
    when a rank of a `timed` item waited for a CPU too long (Note [Ranks kept from
    their cores])."""
    run_dir = Path(tempfile.mkdtemp(prefix="bench-", dir=work))
    records = run_dir / "records.jsonl"
    handover = KeyHandover(run_dir, [item.bench])
    row = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", item.bench)  # POSIX regex: no "\ " escapes
    # The ob1 PML is what Open MPI picks on one machine anyway (vader shared memory);
    # naming it skips probing the others (UCX, cm), a third of MPI_Init's time here.
    args = ["--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "-n", str(ranks), str(binary),
            f"--benchmark_filter=^{row}(/|$)", f"--benchmark_repetitions={REPETITIONS}",
            "--dtl_quick"]  # fewer iterations per repetition; the repetitions and the runs add up
    with handover, RankWaits(binary.name, ranks) as waits:
        run = run_mpi(args, run_dir, 120, dict(DTL_PROGRESS_FILE=str(records), **handover.env()))
    log(run.output)
    rows, untrusted = read_records(records, handover.key)
    shutil.rmtree(run_dir, ignore_errors=True)
    value, why = run_result(rows, untrusted, run, item, ranks)
    wait, seconds = waits.worst()
    log(f"cpu wait: the ranks waited for a CPU at most {wait:.1%} of the {seconds:.2f} s a rank was seen "
        f"({len(waits.seen)} rank(s) seen)\n")
    if wait > MAX_CPU_WAIT and item.timed:
        raise KeptFromCores(f"a rank of {binary.name} waited for a CPU {wait:.0%} of its {seconds:.1f} s (more "
                            f"than {MAX_CPU_WAIT:.0%})", value, why)
    return value, why


def run_result(rows: list[dict], untrusted: str | None, run, item: PerfItem, ranks: int) -> tuple[float | None, str]:
    """bench_value()'s (value, why) from one run's records."""
    if untrusted is not None:
        return None, f"{item.bench}: REFUSED: the benchmark's results could not be authenticated ({untrusted})"
    if any(r["event"] == "begin" and r["world_size"] != ranks for r in rows):
        return None, f"{item.bench}: REFUSED: the benchmark ran at another number of ranks"
    value, why = row_value(rows, item)
    if value is not None or why:
        return value, why
    why = "timed out" if run.timed_out else f"exit code {run.returncode}"
    return None, f"{item.bench}: no result ({why}); the end of the output:\n{run.output[-1500:]}"


@dataclass
class Pairs:
    """The measured pairs of one item: per pair the submission's ratio against the
    reference around it (`ratios`) and the reference's two runs against each other
    (`spreads`, each >= 1). See Note [Noise guard]."""
    ratios: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)

    def add(self, ref_before: float, submission: float, ref_after: float) -> None:
        """One pair; the reference's values are > 0 (score_perf())."""
        self.ratios.append(submission / math.sqrt(ref_before * ref_after))
        self.spreads.append(max(ref_after / ref_before, ref_before / ref_after))

    @property
    def ratio(self) -> float:
        """The median ratio; of an even count, the lower middle (the student's side)."""
        return statistics.median_low(self.ratios)

    @property
    def spread(self) -> float:
        """How far apart the reference's own runs came: the largest factor of any pair."""
        return max(self.spreads)

    @property
    def noise_bound(self) -> float:
        """How slow the reference could look against itself here (Note [Noise guard])."""
        return noise_bound(self.spreads)


def noise_bound(spreads: list[float], chance: float = 0.001) -> float:
    """The smallest B among the pairs' factors n and 1/n (`spreads` the n) such that
    the median (lower middle) of len(spreads) ratios drawn from them is above B with a
    chance below `chance`: fewer than k + 1 of N draws at or below B, k = (N-1) // 2."""
    logs = sorted(s * math.log(n) for n in spreads for s in (1, -1))
    count, k = len(spreads), (len(spreads) - 1) // 2
    for x in logs:
        below = sum(1 for y in logs if y <= x) / len(logs)
        above_median = sum(math.comb(count, j) * below ** j * (1 - below) ** (count - j) for j in range(k + 1))
        if above_median < chance:
            return math.exp(x)
    return math.exp(logs[-1])


def judge(pairs: Pairs, item: PerfItem) -> str:
    """"full" (at or below full_at), "scored" (slower than the noise explains),
    "unclear" (within the noise of full_at: measure more), or "too noisy" (at or
    below full_at, but the interval of the median reaches zero_at: say so now, no
    more pairs). See Note [Noise guard]."""
    if pairs.ratio <= item.full_at:
        return "full" if median_interval(pairs.ratios)[1] < item.zero_at else "too noisy"
    if pairs.ratio > item.full_at * pairs.noise_bound:
        return "scored"
    return "unclear"


# Note [Early stop]
# ~~~~~~~~~~~~~~~~~
# Most speed items are not close calls: a correct submission runs about as fast
# as the reference, a slow one many times slower. Measuring the `runs` pairs the
# noise guard asks for before it may lower a score (5) is then time spent saying
# what the first pairs said already, at three program starts per pair. So after
# `early_runs` pairs (3 in the rubrics) the grader stops when the interval of the
# median ratio lies wholly on one side (early_verdict()):
#
#   - every pair at or below full_at: full points (the median cannot be above,
#     and the interval's high end, at most the largest pair, stays under zero_at,
#     so judge()'s interval check holds too);
#   - every pair above zero_at x B (B the noise bound of these pairs, here the
#     largest spread): no points, slower than the noise explains at every pair.
#
# Anything else measures on to `runs` pairs and is judged as before (judge()).
# So the reference loses points only where judge() at `runs` pairs or more says
# "scored", as before, or where every one of its first pairs came out beyond
# zero_at x B, which the simulations of test_perf_fairness.py never saw. A
# submission a little slower than full_at (ratio 1.6, say) stops early only if
# every one of its first pairs came out at or below full_at; else it gets the
# whole measurement. Simulated (test_perf_fairness.TestEarlyStop), the outcomes
# match those without the early stop, at 3.0 pairs on average on a quiet machine
# instead of 5.


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float, float]:
    """(low, high, coverage): a distribution-free interval of the median of what
    `values` sample, from their order statistics (the sign test): the narrowest
    pair (k-th lowest, k-th highest) that covers the median with a chance of at
    least `level`; with too few values for `level` (4 or fewer at 0.9), the lowest
    and highest, with the chance they give (3 values: 0.75)."""
    ordered, count = sorted(values), len(values)

    def coverage(k: int) -> float:  # P(k-th lowest <= median <= k-th highest)
        return 1 - 2 * sum(math.comb(count, j) for j in range(k)) / 2 ** count

    k = 1
    while k + 1 <= (count + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return ordered[k - 1], ordered[count - k], coverage(k)


def early_verdict(pairs: Pairs, item: PerfItem) -> str | None:
    """"full" or "scored" when the first pairs already decide (Note [Early stop]),
    else None: measure on."""
    if max(pairs.ratios) <= item.full_at:
        return "full"
    if min(pairs.ratios) > item.zero_at * pairs.noise_bound:
        return "scored"
    return None


@dataclass
class PerfResult:
    score: float
    status: str                 # "passed", "failed", "not gradable", TOO_NOISY
    output: str
    details: dict = field(default_factory=dict)  # ratio, spread, pairs: results.json's extra_data


def score_perf(item: PerfItem, ranks: int, student: Path, reference: Path, work: Path, log,
               measure=bench_value) -> PerfResult:
    """Scores one speed item at `ranks` ranks from at least `runs` and at most
    `max_runs` pairs (Note [Noise guard]), or from `early_runs` pairs that already
    decide (Note [Early stop]); `measure` is bench_value() (tests give their own)."""
    pairs, lines, voided = Pairs(), [], []
    while True:
        got = []
        for who, binary in (("reference", reference), ("submission", student), ("reference", reference)):
            try:
                value, why = measure(binary, item, ranks, work, log)
            except KeptFromCores as kept:
                if who == "submission":  # its own doing, or a moment the reference runs around it will show
                    value, why = kept.result
                    lines.append(f"  (pair {len(pairs.ratios) + 1}: the submission's run: {kept}; measured all the same)")
                else:
                    voided.append(f"pair {len(pairs.ratios) + 1}'s reference run: {kept}")
                    break
            if value is not None and value <= 0 and who == "reference":
                value, why = None, f"{item.bench}: {item.counter} = {value:g}, nothing to divide by"
            if value is None and who == "reference":
                return PerfResult(0.0, "not gradable", f"the reference's benchmark did not give a result, so "
                                                       f"there is nothing to compare with; left out of the total: {why}")
            if value is None:
                return PerfResult(0.0, "failed", f"the submission's benchmark did not give a result: {why}")
            got.append(value)
        if len(got) < 3:  # a reference run was kept from its cores: this pair does not count
            if len(voided) < MAX_VOIDED_PAIRS:
                continue
            return PerfResult(0.0, TOO_NOISY, (
                f"{TOO_NOISY}: not gradable on this machine now, left out of the total (not 0, not full marks). "
                f"Another process held the cores, so the runs timed the scheduler, not the code (Note [Ranks kept "
                f"from their cores]): " + "; ".join(voided) + ". Grade again on a quieter machine."
                + "".join("\n" + line for line in lines)),
                dict(verdict="kept from cores", pairs=len(pairs.ratios), voided=len(voided), ranks=ranks))
        pairs.add(*got)
        lines.append(f"  pair {len(pairs.ratios)}: reference {got[0]:.3f}, submission {got[1]:.3f}, reference "
                     f"{got[2]:.3f} ({item.counter}): ratio {pairs.ratios[-1]:.2f}, reference against itself "
                     f"{pairs.spreads[-1]:.2f}")
        if len(pairs.ratios) < item.runs:
            verdict = early_verdict(pairs, item) if len(pairs.ratios) >= item.early_runs else None
            if verdict is None:
                continue
            break
        verdict = judge(pairs, item)
        if verdict != "unclear" or len(pairs.ratios) >= item.max_runs:
            break
    n = len(pairs.ratios)
    low, high, coverage = median_interval(pairs.ratios)
    details = dict(ratio=round(pairs.ratio, 4), interval=[round(low, 4), round(high, 4)],
                   interval_coverage=round(coverage, 3), reference_spread=round(pairs.spread, 4),
                   noise_bound=round(pairs.noise_bound, 4), pairs=n, ranks=ranks, verdict=verdict)
    measured = (f"{item.bench}: submission/reference = {pairs.ratio:.2f} (median of {n} pairs at {ranks} ranks, "
                f"{coverage:.0%} interval {low:.2f} to {high:.2f}{'; stopped early' if n < item.runs else ''}; "
                f"full points at <= {item.full_at:g}, none at >= {item.zero_at:g}); the reference against itself "
                f"differed by up to {pairs.spread:.2f}x, so it could look up to {pairs.noise_bound:.2f}x slower "
                f"than itself here\n" + "\n".join(lines))
    if verdict in ("unclear", "too noisy"):
        bound = pairs.noise_bound
        if verdict == "too noisy":
            why = (f"The median ratio {pairs.ratio:.2f} is at or below {item.full_at:g}, but the pairs went from "
                   f"{min(pairs.ratios):.2f} to {max(pairs.ratios):.2f} and the interval of their median reaches "
                   f"{high:.2f}, at or beyond {item.zero_at:g}, where no points are given: they do not say whether "
                   f"this submission earns full points or none ({n} pairs)")
        else:
            why = (f"The median ratio {pairs.ratio:.2f} is above {item.full_at:g}, but the reference's own runs "
                   f"differed by up to {pairs.spread:.2f}x: the reference itself could look {bound:.2f}x slower "
                   f"than itself here, and {item.full_at:g} x {bound:.2f} = {item.full_at * bound:.2f} is above "
                   f"the ratio ({n} pairs, the most this item allows)")
        return PerfResult(0.0, TOO_NOISY, (
            f"{TOO_NOISY}: not gradable on this machine now, left out of the total (not 0, not full marks). "
            f"{why}. Grade again on a quieter machine.\n"
            + measured), details)
    share = min(1.0, max(0.0, (item.zero_at - pairs.ratio) / (item.zero_at - item.full_at)))
    return PerfResult(round(item.points * share, 2), "passed" if share == 1.0 else "failed", measured, details)


# ---------------------------------------------------------------------------
# A load for the grader's own tests

# Note [A load beside the measurement]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The grader's tests check that a reference never loses speed points on a busy
# machine (issue 31): they grade it with a process spinning on one of the
# grader's CPUs. That load matters only while speed is measured, and a spinner
# left running for a whole grading would load every other grading's speed items
# too, so the tests could not share the machine (grader/tests/run_suite.py).
# So with DTL_TEST_SPEED_LOAD=1 in its environment (set by grader/tests only)
# the grader itself spins a process on the lowest CPU of its affinity mask
# inside each item's speed turn, for exactly the measurement, and gives the share
# of a core it got in the row's extra_data (`load_share`), the proof that the
# load was there.

TEST_LOAD_ENV = "DTL_TEST_SPEED_LOAD"


@contextmanager
def load_for_tests(details: dict):
    """Spins a process on one CPU while the block runs, if TEST_LOAD_ENV is 1
    (Note [A load beside the measurement]); puts its share of a core into `details`."""
    if os.environ.get(TEST_LOAD_ENV) != "1":
        yield
        return
    cpu = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                               preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    start = time.monotonic()
    try:
        yield
    finally:
        fields = Path(f"/proc/{spinner.pid}/stat").read_text().rsplit(")", 1)[1].split()
        busy = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        spinner.kill()
        spinner.wait()
        details["load_share"] = round(busy / max(time.monotonic() - start, 1e-9), 3)


# ---------------------------------------------------------------------------
# The rows

def not_gradable_here_row(item: PerfItem, cores: int, why_cores: str) -> dict:
    allowed = sorted(set(item.ranks_allowed) | {item.ranks})
    return dict(name=item.name, ranks=str(item.ranks), score=0.0, max_score=0.0, status=NOT_GRADABLE_HERE,
                visibility=item.visibility,
                output=(f"{NOT_GRADABLE_HERE}: this speed item runs at {' or '.join(map(str, allowed))} ranks, each "
                        f"on a core of its own, and this grader has {why_cores}; more ranks than cores "
                        f"measure the scheduler, not the code. Its {item.points:g} points are left out of the "
                        "total, not given as 0 or as full marks."))


def perf_rows(lab: Lab, passed: set[str], has_reference: bool, exe_dir: Path, work: Path, log,
              student: Path | None = None, reference: Path | None = None) -> list[dict]:
    """The rows of the lab's speed items; `passed`: the names of the items that
    passed. The benchmarks are exe_dir's unless `student` and `reference` name them."""
    student = student or exe_dir / f"lab{lab.number}_student_bench"
    reference = reference or exe_dir / f"lab{lab.number}_bench"
    rows = []
    cores, why_cores = usable_cores()
    if lab.perf and has_reference:
        print(f"  speed: {why_cores}", flush=True)
    for item in lab.perf:
        row = dict(name=item.name, ranks=str(item.ranks), max_score=item.points,
                   visibility=item.visibility)
        missing = [r for r in item.requires if r not in passed]
        ranks = fit_ranks(item, cores)
        if not has_reference:
            row.update(score=0.0, max_score=0.0, status="not gradable without the reference",
                       output="performance points compare with reference/, which this "
                              "repository does not have; they are left out of the total")
        elif ranks is None:
            row = not_gradable_here_row(item, cores, why_cores)
            print(f"  perf   {item.bench}: {NOT_GRADABLE_HERE} ({item.ranks} ranks, {cores} core(s))", flush=True)
        elif missing:
            row.update(score=0.0, status="failed",
                       output="speed counts only for a correct solution; first pass: " + "; ".join(missing))
        else:
            t0 = time.monotonic()
            load: dict = {}
            with speed_turn(lambda text: print(text, flush=True)), load_for_tests(load):
                result = score_perf(item, ranks, student, reference, work, log)
            result.details.update(load)
            moved = "" if ranks == item.ranks else (f"run at {ranks} ranks, not {item.ranks}: {why_cores}; the "
                                                     f"rubric allows {' or '.join(map(str, item.ranks_allowed))}\n")
            # An item left out says so first (its reason, then the rank count it ran at).
            output = result.output + "\n" + moved if result.status in ("not gradable", TOO_NOISY) and moved \
                else moved + result.output
            row.update(score=result.score, status=result.status, output=output,
                       ranks=str(ranks) if not moved else f"{ranks} (not {item.ranks})",
                       extra_data=dict(result.details, cores=cores))
            if result.status in ("not gradable", TOO_NOISY):
                row["max_score"] = 0.0
            if "interval" in result.details:
                low, high = result.details["interval"]
                row["speed"] = (f"ratio {result.details['ratio']:.2f} ({low:.2f}-{high:.2f}), reference spread "
                                f"{result.details['reference_spread']:.2f}x, {result.details['pairs']} pairs")
            print(f"  perf   {item.bench} at {ranks} rank(s): {result.score:g}/{item.points:g} "
                  f"{'(' + TOO_NOISY + ') ' if result.status == TOO_NOISY else ''}"
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
        rows.append(row)
    return rows
