// Lab 08, task A: the column- and row-parallel Linear layers against the unsplit
// nn::Linear (forward, backward, every gradient), at T = the test's rank count;
// the collectives each one issues against the closed form; the bytes of
// parameters each rank holds, exactly; sizes that T does not divide, refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/tp_test_util.h"

namespace lab08_test {
namespace {

// Leading dimensions of x: one row, several rows, (B, T) rows.
const std::vector<nn::Shape> kLeading = {{1}, {5}, {2, 3}};

nn::Shape with_last(nn::Shape leading, std::int64_t last) {
  leading.push_back(last);
  return leading;
}

std::string case_name(const nn::Shape& lead, std::int64_t in, std::int64_t out, bool bias, int groups = 1) {
  return "x " + nn::to_string(with_last(lead, in)) + ", out " + std::to_string(out) + (bias ? ", bias" : ", no bias") +
         (groups > 1 ? ", groups " + std::to_string(groups) : "");
}

// One column-parallel case: forward and backward against the unsplit layer.
void check_column(const nn::Shape& lead, std::int64_t in, std::int64_t out, bool bias, int groups) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::string what = case_name(lead, in, out, bias, groups);
  auto full = random_linear("fc", in, out, bias, 11);
  lab08::ParallelOptions options;
  options.groups = groups;
  lab08::ColumnParallelLinear layer(*full, tp.mpi, options);
  const nn::Tensor x = random_tensor(with_last(lead, in), 21);
  const nn::Tensor dy = random_tensor(with_last(lead, out), 31);
  const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
  const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);

  const nn::Tensor& y = layer.forward(x);
  EXPECT_TRUE(close_to(grouped_column_slice(y_full, groups, T, r), values(y), "y (" + what + ")"));
  const nn::Tensor dy_mine = tensor_of(with_last(lead, out / T), grouped_column_slice(dy, groups, T, r));
  const nn::Tensor& dx = layer.backward(dy_mine, {});
  EXPECT_TRUE(close_to(values(dx_full), values(dx), "dx, the sum over every rank's term (" + what + ")"));
  EXPECT_TRUE(close_to(row_slice(full->weight().grad, groups, T, r), values(layer.local().weight().grad),
                       "this rank's rows of dW (" + what + ")"));
  if (bias) {
    EXPECT_TRUE(close_to(row_slice(full->bias().grad, groups, T, r), values(layer.local().bias().grad),
                         "this rank's entries of db (" + what + ")"));
  }
}

TEST(ColumnParallel, EqualsTheUnsplitLayer) {
  const int T = comm().size();
  for (const nn::Shape& lead : kLeading) {
    for (bool bias : {true, false}) {
      check_column(lead, 4, T, bias, 1);       // one output feature per rank
      check_column(lead, 3, 3 * T, bias, 1);
    }
  }
}

TEST(ColumnParallel, FusedProjectionByGroups) {
  const int T = comm().size();
  for (const nn::Shape& lead : kLeading) check_column(lead, 4, 3 * 2 * T, true, 3);  // qkv-like: [q | k | v]
}

TEST(ColumnParallel, TwoStepsInOtherSlots) {
  // Slots (lab 07): two forwards in flight, backwards in the other order.
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("fc", 3, 2 * T, true, 5);
  lab08::ColumnParallelLinear layer(*full, tp.mpi);
  std::vector<nn::Tensor> xs, dxs_full;
  for (int s = 0; s < 2; ++s) {
    xs.push_back(random_tensor({4, 3}, 40 + s));
    full->set_slot(s);
    full->forward(xs.back());
    layer.set_slot(s);
    layer.forward(xs.back());
  }
  for (int s = 1; s >= 0; --s) {
    const nn::Tensor dy = random_tensor({4, 2 * T}, 50 + s);
    full->set_slot(s);
    const std::vector<double> want = values(full->backward(dy, {}));
    layer.set_slot(s);
    const nn::Tensor& dx = layer.backward(tensor_of({4, 2}, column_slice(dy, T, r)), {});
    EXPECT_TRUE(close_to(want, values(dx), "dx of slot " + std::to_string(s)));
  }
}

void check_row(const nn::Shape& lead, std::int64_t in, std::int64_t out, bool bias) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::string what = case_name(lead, in, out, bias);
  auto full = random_linear("proj", in, out, bias, 12);
  lab08::RowParallelLinear layer(*full, tp.mpi);
  const nn::Tensor x = random_tensor(with_last(lead, in), 22);
  const nn::Tensor dy = random_tensor(with_last(lead, out), 32);
  const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
  const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);

  const nn::Tensor x_mine = tensor_of(with_last(lead, in / T), column_slice(x, T, r));
  const nn::Tensor& y = layer.forward(x_mine);
  EXPECT_TRUE(close_to(values(y_full), values(y), "y, the sum over every rank's term plus the bias (" + what + ")"));
  const nn::Tensor& dx = layer.backward(dy, {});
  EXPECT_TRUE(close_to(column_slice(dx_full, T, r), values(dx), "this rank's columns of dx (" + what + ")"));
  const std::vector<nn::Parameter*> params = layer.parameters();
  EXPECT_EQ(params.size(), bias ? 2u : 1u) << "weight, then bias";
  if (!params.empty()) {
    EXPECT_TRUE(close_to(column_slice(full->weight().grad, T, r), values(params[0]->grad),
                         "this rank's columns of dW (" + what + ")"));
  }
  if (bias && params.size() == 2) {
    EXPECT_TRUE(close_to(values(full->bias().grad), values(params[1]->grad), "db, whole (" + what + ")"));
  }
}

TEST(RowParallel, EqualsTheUnsplitLayer) {
  const int T = comm().size();
  for (const nn::Shape& lead : kLeading) {
    for (bool bias : {true, false}) {
      check_row(lead, T, 3, bias);  // one input feature per rank
      check_row(lead, 2 * T, 5, bias);
    }
  }
}

TEST(RowParallel, NamesAndShapes) {
  Group tp(comm());
  const int T = tp.size();
  auto full = random_linear("proj", 2 * T, 3, true, 1);
  lab08::RowParallelLinear layer(*full, tp.mpi);
  const std::vector<nn::Parameter*> params = layer.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "proj.weight");
  EXPECT_EQ(params[1]->name, "proj.bias");
  EXPECT_EQ(params[0]->value.shape(), (nn::Shape{3, 2}));
  EXPECT_EQ(params[1]->value.shape(), (nn::Shape{3}));
  EXPECT_EQ(layer.output_shape({4, 2}), (nn::Shape{4, 3}));
}

// ---------------------------------------------------------------------------
// The collectives of each layer, against the closed form
// ---------------------------------------------------------------------------

TEST(Comm, ColumnBackwardAllreducesDx) {
  Group tp(comm());
  const int T = tp.size();
  const std::int64_t n = 6, in = 5, out = 2 * T;
  auto full = random_linear("fc", in, out, true, 3);
  lab08::ColumnParallelLinear layer(*full, tp.record);
  tp.record.clear();
  layer.forward(random_tensor({n, in}, 4));
  EXPECT_TRUE(ops_are(tp.record, {}, {}, "the column-parallel forward (f: identity)"));
  tp.record.clear();
  layer.backward(random_tensor({n, out / T}, 5), {});
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {static_cast<std::size_t>(n * in)},
                      "the column-parallel backward (f: allreduce of dx, N x in)"));
  EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllreduce), static_cast<std::size_t>(n * in * 8)) << "f64 dx";
}

TEST(Comm, RowForwardAllreducesY) {
  Group tp(comm());
  const int T = tp.size();
  const std::int64_t n = 6, in = 2 * T, out = 7;
  auto full = random_linear("proj", in, out, true, 3);
  lab08::RowParallelLinear layer(*full, tp.record);
  tp.record.clear();
  layer.forward(random_tensor({n, in / T}, 4));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {static_cast<std::size_t>(n * out)},
                      "the row-parallel forward (g: allreduce of y, N x out)"));
  tp.record.clear();
  layer.backward(random_tensor({n, out}, 5), {});
  EXPECT_TRUE(ops_are(tp.record, {}, {}, "the row-parallel backward (g: identity)"));
}

// ---------------------------------------------------------------------------
// Parameter memory per rank, exactly (the memory tracker)
// ---------------------------------------------------------------------------

TEST(Memory, EachRankHoldsItsSliceOfEveryLayer) {
  Group tp(comm());
  const int T = tp.size();
  const std::int64_t in = 3 * T, out = 4 * T;
  auto& tracker = nn::memory_tracker();
  auto full = random_linear("fc", in, out, true, 1);
  const std::int64_t p0 = tracker.current(nn::MemoryCategory::kParameters);
  const std::int64_t g0 = tracker.current(nn::MemoryCategory::kGradients);
  {
    lab08::ColumnParallelLinear column(*full, tp.mpi);
    const std::int64_t want = (out / T * in + out / T) * 8;  // rows of W and of b
    EXPECT_EQ(tracker.current(nn::MemoryCategory::kParameters) - p0, want) << "column-parallel: out/T (in + 1) f64";
    EXPECT_EQ(tracker.current(nn::MemoryCategory::kGradients) - g0, want) << "column-parallel gradients";
  }
  {
    lab08::RowParallelLinear row(*full, tp.mpi);
    const std::int64_t want = (out * (in / T) + out) * 8;  // columns of W, the whole b
    EXPECT_EQ(tracker.current(nn::MemoryCategory::kParameters) - p0, want)
        << "row-parallel: out in/T + out (the bias is replicated) f64";
    EXPECT_EQ(tracker.current(nn::MemoryCategory::kGradients) - g0, want) << "row-parallel gradients";
  }
}

// ---------------------------------------------------------------------------
// Sizes that T does not divide are refused, naming the argument and the rank
// ---------------------------------------------------------------------------

TEST(Errors, SizesNotDivisibleAreRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  if (T > 1) {
    auto odd = random_linear("odd", T + 1, T + 1, true, 1);
    EXPECT_TRUE(refused([&] { lab08::ColumnParallelLinear layer(*odd, tp.mpi); },
                        {"ColumnParallelLinear", "'full'", std::to_string(T + 1), tp_rank_words(r, T)},
                        "a column-parallel layer of " + std::to_string(T + 1) + " outputs over " + std::to_string(T)));
    EXPECT_TRUE(refused([&] { lab08::RowParallelLinear layer(*odd, tp.mpi); },
                        {"RowParallelLinear", "'full'", std::to_string(T + 1), tp_rank_words(r, T)},
                        "a row-parallel layer of " + std::to_string(T + 1) + " inputs over " + std::to_string(T)));
  }
  // A size T divides is accepted (and the layer is built).
  auto fine = random_linear("fine", 2 * T, 2 * T, true, 1);
  lab08::ColumnParallelLinear column(*fine, tp.mpi);
  lab08::RowParallelLinear row(*fine, tp.mpi);
  EXPECT_EQ(column.local().weight().value.shape(), (nn::Shape{2, 2 * T}));
  EXPECT_TRUE(close_to(row_slice(fine->weight().value, 1, T, r), values(column.local().weight().value),
                       "the column-parallel slice of an accepted size"));
  auto five = random_linear("five", 4, 5, true, 1);
  lab08::ParallelOptions groups3;
  groups3.groups = 3;
  EXPECT_TRUE(refused([&] { lab08::ColumnParallelLinear layer(*five, tp.mpi, groups3); }, {"'full'"},
                      "5 outputs in 3 groups"));
  lab08::ParallelOptions groups0;
  groups0.groups = 0;
  EXPECT_TRUE(refused([&] { lab08::ColumnParallelLinear layer(*five, tp.mpi, groups0); }, {"'options'"}, "groups = 0"));
  EXPECT_TRUE(refused([&] { lab08::RowParallelLinear layer(*five, tp.mpi, groups3); }, {"'options'"},
                      "a row-parallel layer with groups"));
}

}  // namespace
}  // namespace lab08_test
