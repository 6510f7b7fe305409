"""Fair speed items, without building anything (grader/dtlgrade/perf.py; seconds):

- the cores the grader may use: its affinity mask (a child pinned to one CPU
  sees one core) and a cgroup quota (v2 cpu.max, v1 cfs_quota_us, the smallest
  up the hierarchy), read from fake cgroup trees;
- which rank count an item runs at (fit_ranks()), and the "not gradable here"
  row when none fits;
- the noise guard (Note [Noise guard]) on made-up measurements: the reference
  against itself on a noisy machine (seeded random noise, and the numbers of
  issue 31) scores full marks or "too noisy", never less; a slow submission still
  loses its points on a quiet and on a noisy machine, and pairs whose median
  is at or below full_at while the interval of that median reaches zero_at give
  "too noisy", not full points; the pair count grows only while the result is unclear;
- the early stop (Note [Early stop]): after `early_runs` pairs that all say full
  points or all say none, no more pairs; the same guarantees as above, simulated,
  at fewer pairs; a close call still gets the whole measurement;
- one run's value: the median of the row's repetitions, Google Benchmark's
  aggregate rows left aside; the interval of the median ratio;
- ranks kept from their cores (Note [Ranks kept from their cores]): the run
  delay of real processes (two busy ones sharing a CPU wait half the time,
  sleeping ones not at all), a run whose ranks waited too long is void unless
  its item counts bytes; a pair whose reference run was void is measured again,
  a second one leaves the item out, and the submission's own runs never void;
- what a speed row reports: the ratio with its interval and the spread in the
  printed table and in results.json (extra_data), no Gradescope status when too
  noisy.

The machine's speed turn (one speed item at a time, nothing beside it) is
tested in test_turns.py.
"""
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402,F401  (puts grader/ on sys.path)

from dtlgrade import perf  # noqa: E402
from dtlgrade.lab import Lab, PerfItem  # noqa: E402
from dtlgrade.process import RunResult  # noqa: E402
from dtlgrade.report import print_table, test_entry  # noqa: E402


def item(**kw) -> PerfItem:
    args = dict(name="Speed: x", points=5, bench="Row/1 MiB", ranks=2, runs=5, full_at=1.5, zero_at=3.0)
    args.update(kw)
    return PerfItem(**args)


class FakeBench:
    """measure= for score_perf(): the reference's value is 1 and the submission's
    `slowdown`, each times exp(noise()); or given sequences of values."""

    def __init__(self, slowdown=1.0, noise=lambda: 0.0, reference=None, submission=None):
        self.slowdown, self.noise = slowdown, noise
        self.reference = list(reference) if reference is not None else None
        self.submission = list(submission) if submission is not None else None
        self.calls = []

    def __call__(self, binary, item, ranks, work, log):
        self.calls.append((binary.name, ranks))
        if binary.name == "reference":
            return (self.reference.pop(0) if self.reference is not None else math.exp(self.noise())), ""
        if self.submission is not None:
            return self.submission.pop(0), ""
        return self.slowdown * math.exp(self.noise()), ""


def grade_with(bench: FakeBench, it: PerfItem | None = None) -> perf.PerfResult:
    return perf.score_perf(it or item(), 2, Path("submission"), Path("reference"), Path("."), lambda _: None,
                           measure=bench)


def mixture(rng: random.Random, busy_share: float, quiet: float, busy: float):
    """Log-noise of a run: mostly `quiet`, sometimes (busy_share) `busy` (a build, a
    batch beside the grader)."""
    return lambda: rng.gauss(0, busy if rng.random() < busy_share else quiet)


class TestCores(unittest.TestCase):
    def fake_cgroup(self, files: dict[str, str]) -> Path:
        root = Path(tempfile.mkdtemp(prefix="dtl-cgroup-"))
        self.addCleanup(shutil.rmtree, root)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    V1_MOUNT = ("31 23 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                "32 23 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")

    def test_v2_quota_smallest_up_the_hierarchy(self):
        root = self.fake_cgroup({"sys/fs/cgroup/cpu.max": "max 100000\n",
                                 "sys/fs/cgroup/grading/cpu.max": "150000 100000\n",
                                 "sys/fs/cgroup/grading/one/cpu.max": "max 100000\n"})
        cores, why = perf.cgroup_cpu_quota("0::/grading/one\n", self.V2_MOUNT, root)
        self.assertEqual(cores, 1.5)
        self.assertIn("grading/cpu.max", why)

    def test_v2_without_quota(self):
        root = self.fake_cgroup({"sys/fs/cgroup/cpu.max": "max 100000\n",
                                 "sys/fs/cgroup/a/cpu.max": "max 100000\n"})
        self.assertEqual(perf.cgroup_cpu_quota("0::/a\n", self.V2_MOUNT, root), (None, "no cgroup CPU quota"))

    def test_v1_cfs_quota(self):
        root = self.fake_cgroup({"sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us": "200000\n",
                                 "sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n",
                                 "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                                 "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
        cores, _ = perf.cgroup_cpu_quota("4:memory:/docker/x\n3:cpu,cpuacct:/docker/x\n", self.V1_MOUNT, root)
        self.assertEqual(cores, 2.0)

    def test_affinity_of_one_cpu_is_one_core(self):
        cpu = min(os.sched_getaffinity(0))
        code = "import sys; sys.path.insert(0, 'grader'); from dtlgrade import perf; print(perf.usable_cores()[0])"
        out = subprocess.run([sys.executable, "-c", code], cwd=helpers.ROOT, capture_output=True, text=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), check=True).stdout
        self.assertEqual(out.strip(), "1")

    def test_usable_cores_says_how_it_knows(self):
        cores, why = perf.usable_cores()
        self.assertGreaterEqual(cores, 1)
        self.assertLessEqual(cores, len(os.sched_getaffinity(0)))
        self.assertIn("affinity mask", why)

    def test_fit_ranks(self):
        self.assertEqual(perf.fit_ranks(item(ranks=3, ranks_allowed=[2, 3]), 4), 3)
        self.assertEqual(perf.fit_ranks(item(ranks=3, ranks_allowed=[2, 3]), 2), 2)
        self.assertIsNone(perf.fit_ranks(item(ranks=3, ranks_allowed=[2, 3]), 1))
        self.assertIsNone(perf.fit_ranks(item(ranks=3), 2))
        self.assertEqual(perf.fit_ranks(item(ranks=2), 2), 2)

    def test_not_gradable_here_row_is_out_of_the_total(self):
        row = perf.not_gradable_here_row(item(ranks=3), 2, "2 usable core(s): ...")
        self.assertEqual((row["score"], row["max_score"]), (0.0, 0.0))
        self.assertEqual(row["status"], perf.NOT_GRADABLE_HERE)
        self.assertIn("runs at 3 ranks", row["output"])
        self.assertNotIn("status", test_entry(row))

    def test_perf_rows_without_enough_cores(self):
        lab = Lab(number="99", name="99_x", title="x", items=[], perf=[item(ranks=3)])
        real = perf.usable_cores
        perf.usable_cores = lambda: (2, "2 usable core(s): test")
        try:
            (row,) = perf.perf_rows(lab, {"whatever"}, True, Path("/nonexistent"), Path("."), lambda _: None)
        finally:
            perf.usable_cores = real
        self.assertEqual(row["status"], perf.NOT_GRADABLE_HERE)
        self.assertEqual(row["max_score"], 0.0)


    def test_too_noisy_at_fewer_ranks_says_so_first(self):
        """An item moved to 2 ranks and too noisy: its output starts with the reason
        (what Gradescope shows first, and what the grader tests look for)."""
        lab = Lab(number="99", name="99_x", title="x", items=[], perf=[item(ranks=3, ranks_allowed=[2])])
        real = perf.usable_cores, perf.score_perf
        perf.usable_cores = lambda: (2, "2 usable core(s): test")
        perf.score_perf = lambda *a, **k: perf.PerfResult(0.0, perf.TOO_NOISY, f"{perf.TOO_NOISY}: ...", {})
        try:
            (row,) = perf.perf_rows(lab, set(), True, Path("/nonexistent"), Path("."), lambda _: None)
        finally:
            perf.usable_cores, perf.score_perf = real
        self.assertTrue(row["output"].startswith(perf.TOO_NOISY), row["output"])
        self.assertIn("run at 2 ranks, not 3", row["output"])
        self.assertEqual((row["max_score"], row["ranks"]), (0.0, "2 (not 3)"))


class TestNoiseGuard(unittest.TestCase):
    def test_reference_against_itself_never_loses_points(self):
        """200 gradings of the reference against itself per noise level, from a quiet
        machine to one where a run is often 2x off: full marks or too noisy."""
        outcomes = {}
        for quiet, busy, share in ((0.03, 0.2, 0.05), (0.1, 0.5, 0.3), (0.2, 0.8, 0.5)):
            rng = random.Random(31)
            for _ in range(200):
                result = grade_with(FakeBench(1.0, mixture(rng, share, quiet, busy)))
                self.assertIn(result.status, ("passed", perf.TOO_NOISY), result.output)
                if result.status == "passed":
                    self.assertEqual(result.score, 5)
                outcomes[result.status] = outcomes.get(result.status, 0) + 1
        self.assertGreater(outcomes["passed"], outcomes.get(perf.TOO_NOISY, 0))  # mostly graded

    def test_issue_31_numbers_are_not_a_lower_score(self):
        """Issue 31: the reference's time/vendor swung from 0.40 to 0.87 between runs
        and, compared one run with one run, the pairs said 1.47..2.17 (3.63 / 5). The
        reference before and after each submission run evens that out: full marks."""
        reference = [0.40, 0.87, 0.45, 0.85, 0.44, 0.80, 0.86, 0.41, 0.42, 0.84]
        submission = [0.84, 0.83, 0.86, 0.85, 0.87]
        result = grade_with(FakeBench(reference=reference, submission=submission))
        self.assertEqual((result.status, result.score), ("passed", 5), result.output)

    def test_unlucky_pairs_are_too_noisy_not_a_lower_score(self):
        """Worse luck: in most pairs both reference runs came out fast and the
        submission's (the same code) slow, a median ratio near 2. The other pairs show
        the reference 2x apart from itself, so that ratio says nothing: more pairs,
        then "too noisy", out of the total."""
        fast_fast = [0.42, 0.85, 0.43]   # reference, submission, reference
        swung = [0.41, 0.86, 0.87]
        runs = (fast_fast * 3 + swung * 2) * 2
        result = grade_with(FakeBench(reference=[v for i, v in enumerate(runs) if i % 3 != 1],
                                      submission=runs[1::3]))
        self.assertEqual(result.status, perf.TOO_NOISY, result.output)
        self.assertEqual(result.score, 0.0)
        self.assertGreater(result.details["ratio"], 1.5)
        self.assertEqual(result.details["pairs"], 10)  # measured up to max_runs first
        self.assertIn("left out of the total", result.output)

    def test_quiet_reference_takes_the_minimum_pairs(self):
        bench = FakeBench(1.0, mixture(random.Random(1), 0.0, 0.02, 0.02))
        result = grade_with(bench)
        self.assertEqual((result.status, result.score, result.details["pairs"]), ("passed", 5, 5))
        self.assertEqual(len(bench.calls), 15)
        # each pair: the reference, the submission, the reference, back to back
        self.assertEqual([c[0] for c in bench.calls[:3]], ["reference", "submission", "reference"])

    def test_slow_submission_loses_its_points_quiet_and_noisy(self):
        for slowdown, quiet, busy, share in ((3.5, 0.03, 0.2, 0.05), (30.0, 0.1, 0.5, 0.3)):
            rng = random.Random(7)
            for _ in range(50):
                result = grade_with(FakeBench(slowdown, mixture(rng, share, quiet, busy)))
                self.assertEqual((result.status, result.score), ("failed", 0.0), result.output)
                self.assertGreaterEqual(result.details["ratio"], 3.0)

    def test_noise_bound(self):
        self.assertAlmostEqual(perf.noise_bound([1.1, 1.2, 1.05, 1.3, 1.15]), 1.3)  # 5 pairs: the largest
        self.assertLess(perf.noise_bound([12.0] + [1.1] * 9), 1.2)  # one wild pair in 10 weighs little
        self.assertAlmostEqual(perf.noise_bound([12.0, 12.0, 12.0] + [1.1] * 7), 12.0)  # three do
        self.assertEqual(perf.noise_bound([1.0] * 5), 1.0)

    def test_slow_submission_beside_one_wild_pair(self):
        """A slow ring shift on the shared machine: 10x slower, the reference's own
        runs once 12x apart (measured so, with a spinning process and two builds
        beside the grader): more pairs, then scored, not "too noisy"."""
        reference = [1.0, 12.0] + [1.0, 1.1] * 9
        submission = [10.0] * 10
        result = grade_with(FakeBench(reference=reference, submission=submission))
        self.assertEqual((result.status, result.score), ("failed", 0.0), result.output)
        self.assertEqual(result.details["pairs"], 6)

    def test_slow_submission_squeezed_beside_a_wild_load_is_not_full(self):
        """The grader's own test once saw this: a ring shift 10x slower, beside a load
        that swung every run several fold, came out at a median of 1.19 with pairs
        from 0.32 to 6.91, and took full points. The interval of that median reaches
        zero_at: "too noisy" at once (5 pairs, no more), never full points."""
        reference = [1.0, 4.0, 1.0, 1.0, 4.0, 1.0, 1.0, 4.0, 1.0, 1.0] * 2
        submission = [0.64, 2.4, 2.38, 13.8, 0.6, 2.4, 2.38, 13.8, 0.64, 2.5]  # ratios 0.32 .. 6.9
        result = grade_with(FakeBench(reference=reference, submission=submission), item(early_runs=3))
        self.assertEqual(result.status, perf.TOO_NOISY, result.output)
        self.assertEqual((result.score, result.details["verdict"], result.details["pairs"]), (0.0, "too noisy", 5))
        self.assertAlmostEqual(result.details["ratio"], 1.19, places=2)
        self.assertIn("the pairs went from 0.32 to 6.90 and the interval of their median reaches 6.90",
                      result.output)
        self.assertIn("left out of the total", result.output)

    def test_full_points_below_full_at_while_the_interval_stays_under_zero_at(self):
        """The same median with one pair at 2.9: the interval stays below zero_at,
        so the median below full_at gives full points."""
        submission = [1.19, 0.9, 2.9, 1.0, 1.3]
        result = grade_with(FakeBench(reference=[1.0] * 10, submission=submission), item(early_runs=3))
        self.assertEqual((result.status, result.score, result.details["pairs"]), ("passed", 5, 5), result.output)
        result = grade_with(FakeBench(reference=[1.0] * 10, submission=[1.19, 0.9, 3.0, 1.0, 1.3]),
                            item(early_runs=3))
        self.assertEqual(result.status, perf.TOO_NOISY, result.output)  # at zero_at: no longer clear

    def test_partial_points_when_clearly_slower(self):
        result = grade_with(FakeBench(2.25))  # exactly between full_at 1.5 and zero_at 3.0, no noise
        self.assertEqual((result.status, result.score), ("failed", 2.5))
        self.assertEqual(result.details["reference_spread"], 1.0)

    def test_unclear_measures_more_pairs_then_decides(self):
        # pairs 1-5: ratio 1.6 with the reference 1.2x apart (unclear); then quiet pairs at 1.0
        reference = [1.0, 1.2] * 5 + [1.0] * 20
        submission = [1.755] * 5 + [1.0] * 10
        result = grade_with(FakeBench(reference=reference, submission=submission), item(max_runs=12))
        self.assertEqual((result.status, result.score), ("passed", 5), result.output)
        self.assertEqual(result.details["pairs"], 10)  # the lower middle of 10 is the first at 1.0

    def test_failures(self):
        self.assertEqual(grade_with(FakeBench(reference=[None])).status, "not gradable")
        self.assertEqual(grade_with(FakeBench(reference=[1.0, 0.0])).status, "not gradable")

        class NoSubmission(FakeBench):
            def __call__(self, binary, item, ranks, work, log):
                return (None, "crashed") if binary.name == "submission" else (1.0, "")
        result = grade_with(NoSubmission())
        self.assertEqual((result.status, result.score), ("failed", 0.0))

    def test_rubric_checks(self):
        with self.assertRaises(TypeError):
            item(runs=5, max_runs=3)
        with self.assertRaises(TypeError):
            item(full_at=3.0, zero_at=1.5)
        self.assertEqual(item(ranks=3, ranks_allowed=[2]).ranks_allowed, [2, 3])
        self.assertEqual(item(runs=4).max_runs, 8)


NOISE_LEVELS = ((0.03, 0.2, 0.05), (0.1, 0.5, 0.3), (0.2, 0.8, 0.5))  # quiet, busy, share busy


class TestEarlyStop(unittest.TestCase):
    """The rubrics' speed items: at least 3 pairs, 5 before a close call is judged."""

    def early(self, **kw) -> PerfItem:
        return item(runs=5, early_runs=3, **kw)

    def test_reference_against_itself_never_loses_points(self):
        pairs = {}
        for quiet, busy, share in NOISE_LEVELS:
            rng = random.Random(31)
            for _ in range(300):
                result = grade_with(FakeBench(1.0, mixture(rng, share, quiet, busy)), self.early())
                self.assertIn(result.status, ("passed", perf.TOO_NOISY), result.output)
                if result.status == "passed":
                    self.assertEqual(result.score, 5)
                pairs[quiet] = pairs.get(quiet, 0) + result.details["pairs"]
        self.assertLess(pairs[0.03], 3.1 * 300, "a quiet machine: almost every grading stops after 3 pairs")
        self.assertLess(pairs[0.2], 5 * 300, "a noisy one still stops early on average")

    def test_slow_submissions_lose_their_points_at_three_pairs(self):
        for slowdown, (quiet, busy, share) in ((3.5, NOISE_LEVELS[0]), (10.0, NOISE_LEVELS[0]),
                                               (30.0, NOISE_LEVELS[1])):
            rng = random.Random(7)
            for _ in range(50):
                result = grade_with(FakeBench(slowdown, mixture(rng, share, quiet, busy)), self.early())
                self.assertEqual((result.status, result.score), ("failed", 0.0), result.output)
                self.assertEqual(result.details["verdict"], "scored")
            self.assertEqual(result.details["pairs"], 3, result.output)

    def test_noise_never_gives_a_slow_submission_full_points(self):
        """3.5x slower at the noisiest level: without the interval check 13 gradings in
        600 took full points (Note [Noise guard]); with it, none (scored or too noisy)."""
        rng = random.Random(7)
        outcomes = {}
        for _ in range(600):
            quiet, busy, share = NOISE_LEVELS[2]
            result = grade_with(FakeBench(3.5, mixture(rng, share, quiet, busy)), self.early())
            self.assertNotEqual(result.status, "passed", result.output)
            outcomes[result.status] = outcomes.get(result.status, 0) + 1
        self.assertGreater(outcomes["failed"], 200)

    def test_a_close_call_is_measured_in_full(self):
        """Pairs on both sides of full_at: no early verdict; judged at 5 pairs."""
        bench = FakeBench(submission=[1.4, 1.7, 1.6, 1.65, 1.7], reference=[1.0] * 10)
        result = grade_with(bench, self.early())
        self.assertEqual(result.details["pairs"], 5)
        self.assertEqual(result.status, "failed")
        self.assertAlmostEqual(result.score, round(5 * (3.0 - 1.65) / 1.5, 2))
        self.assertNotIn("stopped early", result.output)

    def test_early_stop_at_three_pairs_reports_it(self):
        bench = FakeBench(1.0)
        result = grade_with(bench, self.early())
        self.assertEqual((result.status, result.score, result.details["pairs"]), ("passed", 5, 3))
        self.assertEqual(len(bench.calls), 9)
        self.assertIn("stopped early", result.output)
        self.assertIn("75% interval 1.00 to 1.00", result.output)
        self.assertEqual((result.details["interval"], result.details["interval_coverage"]), ([1.0, 1.0], 0.75))

    def test_one_wild_reference_pair_is_not_an_early_zero(self):
        """All three pairs slow, but the reference's own runs 12x apart in one: not
        decided by the first pairs; the full rule decides (scored, as 10x slower)."""
        reference = [1.0, 12.0] + [1.0, 1.1] * 9
        result = grade_with(FakeBench(reference=reference, submission=[10.0] * 10), self.early())
        self.assertGreater(result.details["pairs"], 3)
        self.assertEqual((result.status, result.score), ("failed", 0.0), result.output)

    def test_rubric_check(self):
        self.assertEqual(item(runs=5).early_runs, 5)  # without early_runs: no early stop
        with self.assertRaises(TypeError):
            item(runs=5, early_runs=6)


class TestOneRun(unittest.TestCase):
    def record(self, name: str, ratio: float | None = None, error: str | None = None) -> dict:
        return dict(event="row", name=name, error=error, counters={} if ratio is None else {"ratio": ratio})

    def test_median_of_the_repetitions_without_the_aggregates(self):
        rows = [dict(event="begin", world_size=2)]
        rows += [self.record("Row/1 MiB/iterations:15/manual_time", r) for r in (1.2, 9.0, 1.0, 1.1, 8.0)]
        rows += [self.record(f"Row/1 MiB/iterations:15/manual_time_{a}", 99.0) for a in ("mean", "median", "cv")]
        rows += [self.record("Row/16 MiB/iterations:15/manual_time", 50.0)]  # another row
        self.assertEqual(perf.row_value(rows, item()), (1.2, ""))

    def test_an_error_or_no_row(self):
        value, why = perf.row_value([self.record("Row/1 MiB", error="not implemented: ring_shift")], item())
        self.assertIsNone(value)
        self.assertIn("not implemented", why)
        self.assertEqual(perf.row_value([self.record("Other/1 MiB", 1.0)], item()), (None, ""))

    def test_median_interval(self):
        self.assertEqual(perf.median_interval([3.0, 1.0, 2.0]), (1.0, 3.0, 0.75))
        low, high, coverage = perf.median_interval([float(v) for v in range(1, 11)])
        self.assertEqual((low, high), (2.0, 9.0))  # the 2nd lowest and highest of 10: 97.9%
        self.assertAlmostEqual(coverage, 1 - 2 * 11 / 1024)
        self.assertEqual(perf.median_interval([1.5]), (1.5, 1.5, 0.0))


class TestKeptFromCores(unittest.TestCase):
    """Note [Ranks kept from their cores]: the run delay of real processes, and what
    a run whose ranks waited too long does to the item. The fake ranks are python3
    started through a link named like a benchmark (the kernel names a process after
    the file it ran)."""

    BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    SLEEPY = "import time\ntime.sleep({seconds})"

    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.folder, True)
        self.binary = self.folder / "lab99_fakebench"
        self.binary.symlink_to(sys.executable)

    def start(self, code: str, seconds: float, cpu: int | None) -> subprocess.Popen:
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        return subprocess.Popen([str(self.binary), "-c", code.format(seconds=seconds)], preexec_fn=pin)

    def waits(self, code: str, count: int, seconds: float = 0.8) -> perf.RankWaits:
        cpu = min(os.sched_getaffinity(0))
        with perf.RankWaits(self.binary.name, ranks=count) as waits:
            procs = [self.start(code, seconds, cpu) for _ in range(count)]
            for proc in procs:
                proc.wait()
        return waits

    def test_two_busy_ranks_on_one_cpu_wait_half_the_time(self):
        waits = self.waits(self.BUSY, 2)
        self.assertEqual(len(waits.seen), 2)
        share, seconds = waits.worst()
        self.assertGreater(share, 0.35)  # 0.5 on a quiet machine, more beside other work
        self.assertGreaterEqual(seconds, 0.3)

    def test_sleeping_is_not_waiting(self):
        share, seconds = self.waits(self.SLEEPY, 2).worst()
        self.assertLess(share, 0.1)
        self.assertGreaterEqual(seconds, 0.3)

    def test_other_processes_and_the_start_up_are_left_out(self):
        waits = perf.RankWaits("lab99_otherbench")
        with waits:
            self.start(self.BUSY, 0.3, None).wait()
        self.assertEqual(waits.seen, {})
        # Seen only in its first STARTUP_SECONDS: nothing to judge.
        self.assertEqual(self.waits(self.BUSY, 2, seconds=perf.STARTUP_SECONDS / 4).worst(), (0.0, 0.0))

    def fake_run(self, code: str):
        def run_mpi(args, cwd, limit, env=None, on_timeout=None):
            cpu = min(os.sched_getaffinity(0))
            procs = [self.start(code, 0.8, cpu) for _ in range(2)]
            for proc in procs:
                proc.wait()
            return RunResult(0, "", 0.8)
        return run_mpi

    def bench_value(self, code: str, timed: bool = True):
        saved = perf.run_mpi
        perf.run_mpi = self.fake_run(code)
        try:
            lines = []
            return perf.bench_value(self.binary, item(timed=timed), 2, self.folder, lines.append), "".join(lines)
        finally:
            perf.run_mpi = saved

    def test_a_run_of_ranks_sharing_a_core_is_void(self):
        with self.assertRaisesRegex(perf.KeptFromCores, r"a rank of lab99_fakebench waited for a CPU \d+% of"):
            self.bench_value(self.BUSY)

    def test_ranks_that_sleep_or_count_bytes_are_measured(self):
        (value, why), log = self.bench_value(self.SLEEPY)
        self.assertIsNone(value)
        self.assertIn("no result", why)  # the fake ranks wrote no rows; nothing voided the run
        self.assertRegex(log, r"cpu wait: the ranks waited for a CPU at most \d+\.\d% of the")
        (value, why), _ = self.bench_value(self.BUSY, timed=False)
        self.assertIn("no result", why)

    def measure_kept(self, kept_calls: set[int], submission: float = 1.0):
        """measure= for score_perf(): reference 1.0, submission `submission`; the calls
        numbered in `kept_calls` (1, 2, ...: reference, submission, reference, ...)
        raise KeptFromCores, carrying the value they measured."""
        calls = []

        def measure(binary, it, ranks, work, log):
            calls.append(binary.name)
            value = 1.0 if binary.name == "reference" else submission
            if len(calls) in kept_calls:
                raise perf.KeptFromCores(f"a rank of {binary.name}_bench waited for a CPU 51% of its 2.0 s", value, "")
            return value, ""
        return measure, calls

    def score(self, measure, **kw):
        return perf.score_perf(item(**kw), 2, Path("submission"), Path("reference"), self.folder, lambda s: None,
                               measure=measure)

    def test_reference_runs_kept_from_their_cores_twice_leave_the_item_out(self):
        # Pair 2's first reference run (call 4), then pair 3's last one (calls 5-7 are pair
        # 2 again, 8-10 pair 3): two voided pairs.
        measure, calls = self.measure_kept({4, 10})
        result = self.score(measure)
        self.assertEqual(len(calls), 10)
        self.assertEqual((result.status, result.score), (perf.TOO_NOISY, 0.0))
        self.assertEqual((result.details["verdict"], result.details["voided"]), ("kept from cores", 2))
        self.assertIn("pair 2's reference run: a rank of reference_bench waited for a CPU 51%", result.output)
        self.assertIn("pair 3's reference run:", result.output)
        self.assertIn("pair 1: reference 1.000, submission 1.000", result.output)

    def test_one_voided_pair_is_measured_again(self):
        measure, calls = self.measure_kept({4})
        result = self.score(measure)
        self.assertEqual((result.status, result.score), ("passed", 5.0))
        self.assertEqual(result.details["pairs"], 5)
        self.assertEqual(len(calls), 3 * 5 + 1)  # the voided pair cost its one run

    def test_the_submission_cannot_void_its_own_runs(self):
        # A submission whose every run starves its own ranks (its threads, its affinity)
        # is measured as it ran, and scored: not left out of the total.
        measure, calls = self.measure_kept({2, 5, 8, 11, 14}, submission=4.0)
        result = self.score(measure)
        self.assertEqual((result.status, result.score), ("failed", 0.0))
        self.assertEqual(result.details["verdict"], "scored")
        self.assertIn("(pair 1: the submission's run: a rank of submission_bench waited for a CPU 51%", result.output)


class TestReported(unittest.TestCase):
    def row(self, status: str) -> dict:
        return dict(name="Speed: x", ranks="2", score=0.0 if status == perf.TOO_NOISY else 5.0,
                    max_score=0.0 if status == perf.TOO_NOISY else 5.0, status=status, visibility="visible",
                    output="...", speed="ratio 1.62, reference spread 1.90x, 10 pairs",
                    extra_data=dict(ratio=1.62, reference_spread=1.9, pairs=10, ranks=2, cores=2))

    def test_table_shows_the_spread(self):
        import io
        out = io.StringIO()
        lab = Lab(number="99", name="99_x", title="x", items=[])
        print_table(lab, [self.row(perf.TOO_NOISY)], 0, 0, out)
        self.assertIn("too noisy to grade speed here  (ratio 1.62, reference spread 1.90x, 10 pairs)",
                      out.getvalue())

    def test_json_has_the_spread_and_no_status_when_too_noisy(self):
        entry = test_entry(self.row(perf.TOO_NOISY))
        self.assertNotIn("status", entry)
        self.assertEqual(entry["extra_data"]["reference_spread"], 1.9)
        self.assertEqual(test_entry(self.row("passed"))["status"], "passed")


if __name__ == "__main__":
    unittest.main()
