"""Lab 08 end to end: `grade.py 08 --reference` gives 155 / 155 (120 public points,
10 for speed and 25 example hidden ones) in 19 items, `--skeleton` gives 0 fast, every item saying
what is not implemented yet; and a submission whose column-parallel layer forgets
f's backward allreduce (each rank returns only its own term of dx) loses exactly
the items built on that layer — the column layer itself, the communication count,
the MLP and attention blocks, the GPT, the grid, the first two hidden items and the speed
item (it counts only once the GPT is right) — and keeps the row-parallel layer, the
vocabulary items, sequence parallelism with its hidden item (its own code path), the
refusals and the overlapped row-parallel layers (tasks F and F2, built from the test's
own slices) with their hidden items: 80 / 155. An overlapped layer that computes the whole
product first and only then issues the chunks' allreduces (right results, nothing
overlapped) passes the equality tests and fails the chunk-order test (task F, in the
kept tree, rebuilt into the student test program only), and so does one that keeps the
whole product aside and copies each chunk in just before its allreduce (the watch
changes the later rows of x at each issue); the same for task F2's reduce-scatters, for
a task F2 that waits for each chunk at once, and for one that cuts the product's rows
in row order (each chunk then a reduce-scatter of the wrong rows: wrong results)."""
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

LAB_DIR = "08_tensor_parallel"
REFERENCE = helpers.ROOT / "reference" / LAB_DIR / "src"

# Task F with nothing overlapped: the whole product, then the chunks' allreduces.
ALL_GEMMS_FIRST = """\
  const std::int64_t rows = x.numel() / in_;
  const std::int64_t k = std::min<std::int64_t>(chunks_, rows);
  std::vector<Work> pending;
  detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
    using T = decltype(zero);
    // fault: the whole product first, then the chunks' allreduces (nothing overlaps)
    nn::gemm(false, true, rows, out_, in_, T{1}, x.data<T>(), in_, weight_.value.data<T>(), in_, T{0},
             cache.y.data<T>(), out_);
    for (std::int64_t c = 0; c < k; ++c) {
      const std::int64_t begin = c * rows / k, end = (c + 1) * rows / k;
      pending.push_back(tp_.allreduce(cache.y.data<T>() + begin * out_,
                                      static_cast<std::size_t>((end - begin) * out_), x.dtype(), ReduceOp::kSum));
    }
  });
  for (Work& work : pending) work.wait();
  if (has_bias_) add_bias(cache.y, bias_.value);
  return cache.y;
"""

# Task F with nothing overlapped, hidden: the whole product into a buffer of its own, then
# each chunk copied into y just before its allreduce (y looks right at every issue).
PRODUCT_COPIED_IN = """\
  const std::int64_t rows = x.numel() / in_;
  const std::int64_t k = std::min<std::int64_t>(chunks_, rows);
  std::vector<Work> pending;
  detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
    using T = decltype(zero);
    // fault: the whole product first, copied into y chunk by chunk (nothing overlaps)
    std::vector<T> product(static_cast<std::size_t>(rows * out_));
    nn::gemm(false, true, rows, out_, in_, T{1}, x.data<T>(), in_, weight_.value.data<T>(), in_, T{0},
             product.data(), out_);
    for (std::int64_t c = 0; c < k; ++c) {
      const std::int64_t begin = c * rows / k, end = (c + 1) * rows / k;
      std::copy(product.begin() + begin * out_, product.begin() + end * out_, cache.y.data<T>() + begin * out_);
      pending.push_back(tp_.allreduce(cache.y.data<T>() + begin * out_,
                                      static_cast<std::size_t>((end - begin) * out_), x.dtype(), ReduceOp::kSum));
    }
  });
  for (Work& work : pending) work.wait();
  if (has_bias_) add_bias(cache.y, bias_.value);
  return cache.y;
"""

# Task F2 with nothing overlapped: every chunk's blocks first, then the chunks' reduce-scatters.
SP_ALL_GEMMS_FIRST = """\
    const int T = tp_.world_size();
    const SequenceShard mine = sequence_shard(x.shape(), T, tp_.rank(), "OverlappedRowParallelLinear.forward", "x");
    const std::int64_t length = mine.length, s = mine.tokens.size, rows = mine.sequences * s;
    const std::int64_t k = std::min<std::int64_t>(chunks_, rows);
    ensure_staging(cache.staging, {T * rows, out_}, x.dtype());
    std::vector<Work> pending;
    detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
      using V = decltype(zero);
      for (int pass = 0; pass < 2; ++pass) {  // fault: pass 0 every GEMM, pass 1 every reduce-scatter
        for (std::int64_t c = 0; c < k; ++c) {
          const std::int64_t begin = c * rows / k, end = (c + 1) * rows / k, size = end - begin;
          V* send = cache.staging.data<V>() + T * begin * out_;
          if (pass == 1) {
            pending.push_back(tp_.reduce_scatter(send, cache.y.data<V>() + begin * out_,
                                                 static_cast<std::size_t>(size * out_), x.dtype(), ReduceOp::kSum));
            continue;
          }
          for (int q = 0; q < T; ++q) {
            for (std::int64_t i = begin; i < end; ++i) {
              nn::gemm(false, true, 1, out_, in_, V{1}, x.data<V>() + ((i / s) * length + q * s + i % s) * in_, in_,
                       weight_.value.data<V>(), in_, V{0}, send + (q * size + i - begin) * out_, out_);
            }
          }
        }
      }
    });
    for (Work& work : pending) work.wait();
    if (has_bias_) add_bias(cache.y, bias_.value);
    return cache.y;
"""

# Task F2 cut as task F cuts: the product's rows in row order, each chunk one reduce-scatter.
SP_ROW_ORDER = """\
    const int T = tp_.world_size();
    const std::int64_t rows = x.numel() / in_, mine = rows / T;
    ensure_staging(cache.staging, {rows, out_}, x.dtype());
    detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
      using V = decltype(zero);
      nn::gemm(false, true, rows, out_, in_, V{1}, x.data<V>(), in_, weight_.value.data<V>(), in_, V{0},
               cache.staging.data<V>(), out_);
      // fault: rank q's block is rows [q N/T, (q+1) N/T) of the product, sequence order ignored
      tp_.reduce_scatter(cache.staging.data<V>(), cache.y.data<V>(), static_cast<std::size_t>(mine * out_),
                         x.dtype(), ReduceOp::kSum).wait();
    });
    if (has_bias_) add_bias(cache.y, bias_.value);
    return cache.y;
"""

# Items that need the column-parallel backward's allreduce (grader/rubrics/08.toml).
LOSES = ("1. ", "3. ", "4. ", "5. ", "8. ", "10. ", "Hidden: column/row", "Hidden: a tensor-parallel GPT", "Speed: ")


class TestLab08Reference(helpers.GraderAssertions, unittest.TestCase):
    """The reference, graded once, under a load (a process spinning on one of the
    grader's CPUs while it measures speed: helpers.UNDER_LOAD): full marks, the speed item at full
    marks or left out with its reason, never lower (test_speed_under_load skips
    this lab: graded here once, not twice)."""
    RUNS_ALONE = "it measures speed (its speed turns would wait for other classes to drain)"  # run_suite.py

    @classmethod
    def setUpClass(cls):
        helpers.grade_kept(cls, "08", under_load=True)

    def test_the_load_was_there(self):
        self.assertLoadWasThere(self.graded.json["tests"])

    def test_full_marks(self):
        self.assertReferenceFullMarks(self.graded, 155, items=19)  # 13 public + 1 speed + 5 example hidden items

    def run_fault(self, function: str, body: str, test: str, passes: bool = False) -> str:
        """Builds `body` as `function` into the kept tree's student test program, runs
        `test` at 3 ranks, checks that it fails (or passes, with `passes`), and
        returns its output. The caller puts the reference's body back."""
        helpers.mutate_kept(self.work, "08", function, body)
        build = helpers.rebuild_kept(self.work, "08", "lab08_student_test")
        self.assertEqual(build.returncode, 0, build.stdout[-3000:] + build.stderr[-3000:])
        rc, out, _ = helpers.run_kept_tests(self.work, "08", 3, f"--gtest_filter={test}")
        (self.assertEqual if passes else self.assertNotEqual)(rc, 0, out[-3000:])
        return out

    def test_all_gemms_first_loses_the_overlap_item(self):
        # In the kept tree: the fault rebuilt into the student test program only. Its
        # results are right, so only ChunkWatch (what y holds at each issue) can tell.
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        function = "OverlappedRowParallelLinear::forward"
        try:
            self.run_fault(function, ALL_GEMMS_FIRST, "Overlap.EqualsTheUnsplitLayer", passes=True)
            rc, out, _ = helpers.run_kept_tests(self.work, "08", 3,
                                                "--gtest_filter=Overlap.ChunksAreIssuedAsTheyAreComputed")
            self.assertNotEqual(rc, 0, out[-3000:])
            self.assertIn("a GEMM run ahead of the previous chunk's allreduce shows here", out, out[-3000:])
            # The same product kept aside and copied in at each issue: the watch changes the
            # later rows of x after each issue (Note [The watch changes x]), so it is stale.
            out = self.run_fault(function, PRODUCT_COPIED_IN, "Overlap.ChunksAreIssuedAsTheyAreComputed")
            self.assertIn("of x as it is now", out, out[-3000:])
            # Each chunk's test() polled until it finishes before the next chunk: right results,
            # nothing overlapped (Note [A spin is a wait]).
            out = self.run_fault(function, helpers.mutated_body(function, "08", (
                "                                      ReduceOp::kSum));",
                "                                      ReduceOp::kSum));\n"
                "      while (!pending.back().test()) {\n      }  // fault: a spin is a wait")),
                "Overlap.ChunksAreIssuedAsTheyAreComputed")
            self.assertIn("chunk 0's allreduce was waited for (or its test() polled until it finished)", out,
                          out[-3000:])
        finally:  # the source back to the reference's
            helpers.mutate_kept(self.work, "08", function, helpers.reference_body(function, "08"))

    def test_sp_all_gemms_first_loses_the_overlap_item(self):
        # Task F2 the same way: right results, every chunk computed before the first issue.
        self.assertIsNotNone(self.work, "grade.py --keep printed no folder")
        function = "OverlappedRowParallelLinear::forward_sp"
        try:
            self.run_fault(function, SP_ALL_GEMMS_FIRST, "OverlapSequence.EqualsTheUnsplitLayerOnThisRanksTokens",
                           passes=True)
            rc, out, _ = helpers.run_kept_tests(self.work, "08", 3,
                                                "--gtest_filter=OverlapSequence.ChunksAreIssuedAsTheyAreComputed")
            self.assertNotEqual(rc, 0, out[-3000:])
            self.assertIn("a GEMM run ahead of the previous chunk's reduce-scatter shows here", out, out[-3000:])
            # Each chunk waited for at once: right results, the chunks in order, nothing overlapped.
            out = self.run_fault(function, helpers.mutated_body(function, "08", (
                "        pending.push_back(tp_.reduce_scatter(send, cache.y.data<V>() + begin * out_,\n"
                "                                             static_cast<std::size_t>(size * out_), x.dtype(), "
                "ReduceOp::kSum));",
                "        tp_.reduce_scatter(send, cache.y.data<V>() + begin * out_, static_cast<std::size_t>(size * out_),\n"
                "                           x.dtype(), ReduceOp::kSum).wait();  // fault: waited at once")),
                "OverlapSequence.ChunksAreIssuedAsTheyAreComputed")
            self.assertIn("was waited for (or its test() polled until it finished) before chunk", out, out[-3000:])
            # Cut in the product's row order (task F's cut): the ranks receive the wrong tokens.
            out = self.run_fault(function, SP_ROW_ORDER, "OverlapSequence.EqualsTheUnsplitLayerOnThisRanksTokens")
            self.assertIn("y, this rank's tokens", out, out[-3000:])
        finally:  # the source back to the reference's
            helpers.mutate_kept(self.work, "08", function, helpers.reference_body(function, "08"))


class TestLab08Skeleton(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graded = helpers.grade("--skeleton", lab="08")

    def test_zero_fast(self):
        self.assertSkeletonZeroFast(self.graded)


class TestLab08ForgottenAllreduce(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder = helpers.temp_folder(cls)
        for path in REFERENCE.glob("*.cc"):
            shutil.copyfile(path, folder / path.name)
        # Lab 07's files beside them (a flat upload may hold a dependency lab's): the
        # grid is lab 07's (lab07/grid.h), so its item fails here for the layer only.
        for path in (helpers.ROOT / "reference" / "07_pipeline" / "src").glob("*.cc"):
            shutil.copyfile(path, folder / path.name)
        target = folder / "parallel_linear.cc"
        body = ("    // f's backward forgotten: each rank keeps its own term dy_r W_r.\n"
                "    return local_.backward(dy, grad_ready);\n")
        target.write_text(helpers.replace_solution(target.read_text(), "ColumnParallelLinear::backward", body))
        cls.graded = helpers.grade("--submission", str(folder), lab="08")

    def test_only_the_items_on_the_column_layer_fail(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        tests = self.graded.json["tests"]
        failing = [t for t in tests if t["name"].startswith(LOSES)]
        passing = [t for t in tests if t not in failing]
        self.assertEqual(len(failing), 9, [t["name"] for t in failing])
        self.assertZero(failing)
        self.assertFullMarks(passing)
        self.assertEqual(self.graded.json["score"], 80)
        column = next(t for t in tests if t["name"].startswith("1. "))
        # The failure names the rank, the element, expected against got.
        self.assertRegex(column["output"], r"rank \d+: dx, the sum over every rank's term .*\[\d+\] expected ")


if __name__ == "__main__":
    unittest.main()
