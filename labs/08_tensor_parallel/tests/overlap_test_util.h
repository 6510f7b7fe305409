// What the tests of lab 08's task F share (public and hidden): the overlapped
// layer built from the test's own slicing of a full layer; one forward and
// backward against the unsplit layer; and ChunkWatch, a Communicator that looks
// at the layer's output at each allreduce's issue, to see the chunks computed and
// issued one after another (See Note [Overlapping the row-parallel allreduce]).
// Task F2 (sequence parallelism): the same against the unsplit layer on this rank's
// tokens (tokens_of()), and StagingWatch, which looks at the staging buffer at each
// reduce-scatter's issue (See Note [Overlapping the sequence-parallel reduce-scatter]).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/testing/early_wait.h"
#include "labs/08_tensor_parallel/tests/tp_test_util.h"
#include "lab08/overlapped_linear.h"

namespace lab08_test {

/// This rank's layer, with k = `chunks`, from the test's own slicing of `full` (never the lab's).
inline std::unique_ptr<lab08::OverlappedRowParallelLinear> overlapped_of(nn::Linear& full, dtl::Communicator& tp,
                                                                         int T, int r, int chunks,
                                                                         bool sequence_parallel = false) {
  const nn::Tensor& w = full.weight().value;
  const nn::Tensor weight = tensor_of({w.dim(0), w.dim(1) / T}, column_slice(w, T, r), w.dtype());
  const nn::Tensor bias = full.bias().value.defined() ? full.bias().value.clone(nn::MemoryCategory::kOther) : nn::Tensor();
  return std::make_unique<lab08::OverlappedRowParallelLinear>(full.name(), weight, bias, tp, chunks,
                                                              sequence_parallel);
}

/// `leading` with `last` appended: (N..., last).
inline nn::Shape rows_by(nn::Shape leading, std::int64_t last) {
  leading.push_back(last);
  return leading;
}

/// Values for a case: (shape, seed) -> an f64 tensor, the same on every rank.
using MakeValues = std::function<nn::Tensor(const nn::Shape&, std::uint64_t)>;

/// One case: forward and backward against the unsplit layer of `dtype`, within `tol` (0: bit for bit).
inline void check_overlapped(const nn::Shape& lead, std::int64_t in, std::int64_t out, bool bias, int chunks,
                             const MakeValues& make, double tol, nn::DType dtype = nn::DType::kF64) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::string what = "x " + nn::to_string(rows_by(lead, in)) + ", out " + std::to_string(out) +
                           (bias ? ", bias" : ", no bias") + ", " + std::to_string(chunks) + " chunks, " +
                           dtl::dtype_name(dtype);
  auto of = [&](const nn::Shape& shape, std::uint64_t seed) { return tensor_of(shape, values(make(shape, seed)), dtype); };
  dtl::Rng rng(3);
  nn::Linear full("proj", in, out, dtype, rng, 0.5, bias);
  full.weight().value.copy_from(of({out, in}, 7));
  if (bias) full.bias().value.copy_from(of({out}, 8));
  auto layer = overlapped_of(full, tp.mpi, T, r, chunks);
  const nn::Tensor x = of(rows_by(lead, in), 9);
  const nn::Tensor dy = of(rows_by(lead, out), 10);
  const std::vector<double> y_full = values(full.forward(x));
  const nn::Tensor dx_full = full.backward(dy, {}).clone(nn::MemoryCategory::kOther);

  const nn::Tensor x_mine = tensor_of(rows_by(lead, in / T), column_slice(x, T, r), dtype);
  const nn::Tensor& y = layer->forward(x_mine);
  EXPECT_TRUE(close_to(y_full, values(y), "y, every rank's chunks summed plus the bias (" + what + ")", tol, y.shape()));
  const nn::Tensor& dx = layer->backward(dy, {});
  EXPECT_TRUE(close_to(column_slice(dx_full, T, r), values(dx), "this rank's columns of dx (" + what + ")", tol,
                       dx.shape()));
  const std::vector<nn::Parameter*> params = layer->parameters();
  EXPECT_TRUE(close_to(column_slice(full.weight().grad, T, r), values(params[0]->grad),
                       "this rank's columns of dW (" + what + ")", tol));
  if (bias) {
    EXPECT_TRUE(close_to(values(full.bias().grad), values(params[1]->grad), "db (" + what + ")", tol));
  }
}

inline nn::Tensor random_of(const nn::Shape& shape, std::uint64_t seed) { return random_tensor(shape, seed); }

// Integers in [-3, 3]: every product and sum is exact, in any order.
inline nn::Tensor integers_of(const nn::Shape& shape, std::uint64_t seed) {
  std::vector<double> v = random_values(nn::shape_numel(shape), seed);
  for (double& e : v) e = std::round(3.0 * e);
  return tensor_of(shape, v);
}

// Note [The watch changes x]: a watch sees the layer's buffers only when a
// collective is issued, so a layer that multiplied every chunk into a buffer of
// its own first, then copied each chunk in just before its issue, would look
// overlapped without being so. So after each issue the watch changes the rows of
// x that the later chunks read (x_step(): a fixed amount per feature), and checks
// each chunk against the product of x as it is at that chunk's issue. A layer
// that reads a chunk's rows of x before the previous chunk's collective was
// issued holds a stale product there. The contract says so: read a chunk's rows
// of x only once the chunk before it is issued. The same change catches a GEMM
// run ahead of the previous chunk's issue, so a watch reads only the rows the
// call was handed: a layer may send from a buffer of its own, and reading past
// the call's range could run off its end.

/// The change the watches make to one row of x after an issue: + (1 + i/4) at feature i.
inline void x_step(double* row, std::int64_t in) {
  for (std::int64_t i = 0; i < in; ++i) row[i] += 1.0 + 0.25 * static_cast<double>(i);
}

/// What one x_step() adds to a row of x_r W_r^T: out values, from this rank's (out, in) slice w.
inline std::vector<double> product_of_step(const std::vector<double>& w, std::int64_t out, std::int64_t in) {
  std::vector<double> step(static_cast<std::size_t>(out), 0.0);
  for (std::int64_t j = 0; j < out; ++j) {
    for (std::int64_t i = 0; i < in; ++i) {
      step[static_cast<std::size_t>(j)] += (1.0 + 0.25 * static_cast<double>(i)) * w[static_cast<std::size_t>(j * in + i)];
    }
  }
  return step;
}

// A layer that waits for chunk c - 1 before issuing chunk c leaves the link idle
// while chunk c is multiplied, and a loop on test() until it returns true is the
// same wait (Note [A spin is a wait] in harness/testing/early_wait.h). So each
// chunk's Work is "too early" until the next chunk is issued.

/// Per chunk issued, whether the layer waited for it (or spun on it) before issuing the next.
struct ChunkWaits {
  std::size_t chunks = 0;   // how many chunks the forward is to issue
  std::vector<int> waited;  // one entry per chunk issued so far
};

/// The Work of chunk `chunk`'s collective behind a watch: a wait (or a spin) on it before
/// the next chunk is issued is recorded in `waits` (Note [A spin is a wait]).
inline std::unique_ptr<dtl::WorkImpl> chunk_work(dtl::Work work, const dtl::OpInfo& info, ChunkWaits* waits,
                                                 std::size_t chunk) {
  return std::make_unique<dtl::testing::EarlyWaitWork>(
      std::move(work), info,
      [waits, chunk] { return chunk + 1 < waits->chunks && waits->waited.size() == chunk + 1; },
      [waits, chunk] { waits->waited[chunk] = 1; });
}

// A Communicator between the layer and Open MPI that, at each allreduce's issue, reads
// the rows the allreduce was handed: the chunk being issued must hold this rank's
// product already (x_r W_r^T, the test's own loops, of x as it is at the issue),
// and the previous chunk must not have been waited for yet (Note [A spin is a wait]).
class ChunkWatch final : public dtl::testing::WatchCommunicator {
 public:
  /// product: x_r W_r^T of the x given to forward, (N, out). x, in: that x's data, (N, in),
  /// which the watch changes as the chunks are issued (x_step()); step: x_step()'s
  /// product, out values: what each change adds to a row of the product.
  /// chunks: how many chunks the forward is to issue (min(k, N)).
  ChunkWatch(dtl::Communicator& inner, std::vector<double> product, std::int64_t out, double* x, std::int64_t in,
             std::vector<double> step, std::size_t chunks)
      : WatchCommunicator(inner, "chunk watch"),
        product_(std::move(product)), out_(out), x_(x), in_(in), step_(std::move(step)) {
    waits_.chunks = chunks;
  }

  struct Issue {
    std::int64_t first_row = -1, rows = 0;  // where the buffer lies in y (-1: not inside it)
    std::int64_t rows_ready = 0;            // rows of the chunk holding the product at the issue
    bool previous_waited = false;           // the previous chunk was waited for (or spun on) before this issue
  };
  std::vector<Issue> issues;

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    const auto address = reinterpret_cast<std::uintptr_t>(buf);
    if (issues.empty()) base_ = address;  // chunk 0 starts at row 0 of y
    Issue issue;
    const auto n = static_cast<std::int64_t>(product_.size());
    const std::int64_t offset = (static_cast<std::int64_t>(address) - static_cast<std::int64_t>(base_)) /
                                static_cast<std::int64_t>(sizeof(double));
    const auto* chunk = static_cast<const double*>(buf);  // only the rows this call was handed are read
    const auto changes = static_cast<double>(issues.size());  // x_step()s so far on every row from here on
    if (info.dtype == dtl::DType::kF64 && address >= base_ && offset % out_ == 0 &&
        offset + static_cast<std::int64_t>(info.count) <= n) {
      issue.first_row = offset / out_;
      issue.rows = static_cast<std::int64_t>(info.count) / out_;
      for (std::int64_t i = 0; i < issue.rows; ++i) {
        const std::int64_t row = issue.first_row + i;
        bool holds = true;
        for (std::int64_t j = 0; j < out_; ++j) {
          const double want = product_[static_cast<std::size_t>(row * out_ + j)] +
                              changes * step_[static_cast<std::size_t>(j)];
          holds = holds && std::abs(chunk[i * out_ + j] - want) <= kTol * (1.0 + std::abs(want));
        }
        issue.rows_ready += holds ? 1 : 0;
      }
      for (std::int64_t row = issue.first_row + issue.rows; row < n / out_; ++row) x_step(x_ + row * in_, in_);
    }
    const std::size_t c = issues.size();
    issue.previous_waited = c > 0 && waits_.waited[c - 1] != 0;
    issues.push_back(issue);
    waits_.waited.push_back(0);
    return chunk_work(inner().allreduce(buf, info.count, info.dtype, info.op), info, &waits_, c);
  }

 private:
  std::vector<double> product_;
  std::int64_t out_;
  double* x_;
  std::int64_t in_;
  std::vector<double> step_;
  std::uintptr_t base_ = 0;  // y's first row: where chunk 0's allreduce began
  ChunkWaits waits_;
};

/// One forward of `rows` rows in `chunks` chunks behind a ChunkWatch: the chunks in row order,
/// each issued with its rows computed and the later ones not yet.
inline void check_chunks(std::int64_t rows, int chunks) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t in = 2 * T, out = 3, local_in = in / T;
  auto full = random_linear("proj", in, out, true, 17);
  const nn::Tensor x_mine = tensor_of({rows, local_in}, column_slice(random_tensor({rows, in}, 18), T, r));
  // The test's own product x_r W_r^T (plain loops).
  const std::vector<double> w = column_slice(full->weight().value, T, r), xv = values(x_mine);
  std::vector<double> product(static_cast<std::size_t>(rows * out), 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < out; ++j) {
      for (std::int64_t k = 0; k < local_in; ++k) {
        product[static_cast<std::size_t>(i * out + j)] +=
            xv[static_cast<std::size_t>(i * local_in + k)] * w[static_cast<std::size_t>(j * local_in + k)];
      }
    }
  }
  const std::int64_t k = std::min<std::int64_t>(chunks, rows);
  ChunkWatch watch(tp.record, product, out, x_mine.data<double>(), local_in, product_of_step(w, out, local_in),
                   static_cast<std::size_t>(k));
  auto layer = overlapped_of(*full, watch, T, r, chunks);
  tp.record.clear();
  layer->forward(x_mine);

  const std::string what = std::to_string(rows) + " rows in " + std::to_string(chunks) + " chunks, rank " +
                           std::to_string(r);
  const auto& ops = tp.record.ops();
  EXPECT_EQ(static_cast<std::int64_t>(ops.size()), k)
      << what << ": one allreduce per chunk, min(chunks, rows) of them; issued " << describe(tp.record);
  if (ops.size() != watch.issues.size()) return;  // nothing collective follows in this case
  std::int64_t next_row = 0, smallest = rows, largest = 0;
  for (std::size_t c = 0; c < watch.issues.size(); ++c) {
    const ChunkWatch::Issue& issue = watch.issues[c];
    EXPECT_EQ(ops[c].kind, CollectiveKind::kAllreduce) << what;
    EXPECT_EQ(issue.first_row, next_row) << what << ": chunk " << c << "'s allreduce is not on the rows of y that "
                                         << "follow chunk " << c - 1 << "'s (consecutive rows, in row order, in place)";
    EXPECT_EQ(issue.rows_ready, issue.rows) << what << ": at the issue of chunk " << c << "'s allreduce, only "
                                            << issue.rows_ready << " of its " << issue.rows
                                            << " rows of y hold this rank's product x_r W_r^T of x as it is now"
                                            << " (the test changes the later rows of x after each issue: a chunk's"
                                            << " rows of x may be read only once the chunk before it is issued, so"
                                            << " a GEMM run ahead of the previous chunk's allreduce shows here)";
    EXPECT_FALSE(issue.previous_waited) << what << ": chunk " << c - 1 << "'s allreduce was waited for (or its"
                                        << " test() polled until it finished) before chunk " << c << "'s was issued:"
                                        << " the link idled while chunk " << c << " was multiplied (nothing overlaps)";
    next_row = issue.first_row + issue.rows;
    smallest = std::min(smallest, issue.rows);
    largest = std::max(largest, issue.rows);
  }
  EXPECT_EQ(next_row, rows) << what << ": the chunks cover every row once";
  EXPECT_LE(largest - smallest, 1) << what << ": chunk sizes differ by at most one row";
}

// ---------------------------------------------------------------------------
// Task F2: the sequence-parallel exit, reduce-scattered chunk by chunk
// ---------------------------------------------------------------------------

/// One case: `shape` = (..., S, in) is the whole input; rank r gets its input columns of every
/// token; y must be this rank's tokens of the unsplit layer's output, dx its columns of the
/// unsplit dx (from the whole dy: every rank's tokens), dW its columns, db the sum over this
/// rank's tokens of dy (the partial sum sequence parallelism leaves for
/// allreduce_sequence_parallel_gradients()). Forward: min(k, n) reduce-scatters; backward one all-gather.
inline void check_overlapped_sp(const nn::Shape& shape, std::int64_t out, bool bias, int chunks,
                                const MakeValues& make, double tol, nn::DType dtype = nn::DType::kF64) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t in = shape.back();
  const std::string what = "sequence parallel, x " + nn::to_string(shape) + ", out " + std::to_string(out) +
                           (bias ? ", bias" : ", no bias") + ", " + std::to_string(chunks) + " chunks, " +
                           dtl::dtype_name(dtype) + ", rank " + std::to_string(r) + " of " + std::to_string(T);
  auto of = [&](const nn::Shape& s, std::uint64_t seed) { return tensor_of(s, values(make(s, seed)), dtype); };
  dtl::Rng rng(3);
  nn::Linear full("proj", in, out, dtype, rng, 0.5, bias);
  full.weight().value.copy_from(of({out, in}, 7));
  if (bias) full.bias().value.copy_from(of({out}, 8));
  auto layer = overlapped_of(full, tp.record, T, r, chunks, true);
  nn::Shape out_shape = shape;
  out_shape.back() = out;
  const nn::Tensor x = of(shape, 9);
  const nn::Tensor dy = of(out_shape, 10);  // every rank's tokens: the one-process dy
  const std::vector<double> y_mine = values(tokens_of(full.forward(x), T, r));
  const nn::Tensor dx_full = full.backward(dy, {}).clone(nn::MemoryCategory::kOther);

  nn::Shape local = shape;
  local.back() = in / T;
  const nn::Tensor x_mine = tensor_of(local, column_slice(x, T, r), dtype);
  tp.record.clear();
  const nn::Tensor& y = layer->forward(x_mine);
  EXPECT_TRUE(close_to(y_mine, values(y),
                       "y, this rank's tokens, every rank's chunks summed plus the bias (" + what + ")", tol,
                       y.shape()));
  const std::int64_t n = x.numel() / in / T;  // this rank's rows of y
  EXPECT_EQ(static_cast<std::int64_t>(tp.record.ops().size()), std::min<std::int64_t>(chunks, n))
      << what << ": one reduce-scatter per chunk in forward, min(chunks, B S/T); issued " << describe(tp.record);
  for (const auto& op : tp.record.ops()) EXPECT_EQ(op.kind, CollectiveKind::kReduceScatter) << what;
  const nn::Tensor dy_mine = tokens_of(dy, T, r);
  tp.record.clear();
  const nn::Tensor& dx = layer->backward(dy_mine, {});
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather}, {static_cast<std::size_t>(dy_mine.numel())},
                      "the overlapped sequence-parallel backward (one all-gather of dy, given)"));
  EXPECT_TRUE(close_to(column_slice(dx_full, T, r), values(dx), "this rank's columns of dx (" + what + ")", tol,
                       dx.shape()));
  const std::vector<nn::Parameter*> params = layer->parameters();
  EXPECT_TRUE(close_to(column_slice(full.weight().grad, T, r), values(params[0]->grad),
                       "this rank's columns of dW (" + what + ")", tol, params[0]->grad.shape()));
  if (bias) {
    std::vector<double> db(static_cast<std::size_t>(out), 0.0);
    const std::vector<double> d = values(dy_mine);
    for (std::size_t i = 0; i < d.size(); ++i) db[i % static_cast<std::size_t>(out)] += d[i];
    EXPECT_TRUE(close_to(db, values(params[1]->grad), "db, this rank's tokens only (" + what + ")", tol));
  }
}

// A Communicator between the layer and Open MPI that, at each reduce-scatter's issue,
// reads the staging buffer the chunks are sent from: the chunk being issued must
// hold its T blocks of this rank's product already (the test's own loops and
// layout, of x as it is at the issue); the chunk must receive
// into its own rows of y; and the previous chunk must not have been waited for yet
// (Note [A spin is a wait]).
class StagingWatch final : public dtl::testing::WatchCommunicator {
 public:
  /// staged: the whole staging buffer as the contract lays it out for k chunks, (T n, out),
  /// from the x given to forward. chunk_rows: each chunk's [begin, end) of this rank's n rows
  /// of y, in order. x_rows: for each staged row, the row of x it multiplies; x, in: that
  /// x's data, which the watch changes as the chunks are issued (Note [The watch changes x]);
  /// step: what one x_step() adds to a staged row.
  StagingWatch(dtl::Communicator& inner, std::vector<double> staged, std::int64_t out,
               std::vector<std::pair<std::int64_t, std::int64_t>> chunk_rows, std::vector<std::int64_t> x_rows,
               double* x, std::int64_t in, std::vector<double> step)
      : WatchCommunicator(inner, "staging watch"),
        staged_(std::move(staged)), out_(out), chunks_(std::move(chunk_rows)),
        x_rows_(std::move(x_rows)), x_(x), in_(in), step_(std::move(step)) {
    waits_.chunks = chunks_.size();
  }

  struct Issue {
    bool where = false;                 // sent from, and received into, chunk c's rows of the contract's layout
    std::int64_t rows = 0;              // staged rows of the chunk (T x its rows of y)
    std::int64_t rows_ready = 0;        // of them, holding the product at the issue
    bool previous_waited = false;       // the previous chunk was waited for (or spun on) before this issue
  };
  std::vector<Issue> issues;

 protected:
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void* send, void* recv, const dtl::OpInfo& info) override {
    const auto s = reinterpret_cast<std::uintptr_t>(send), y = reinterpret_cast<std::uintptr_t>(recv);
    if (issues.empty()) send_base_ = s, y_base_ = y;  // chunk 0: the first rows of both
    const std::size_t c = issues.size();
    Issue issue;
    const auto T = static_cast<std::int64_t>(world_size());
    if (c < chunks_.size() && info.dtype == dtl::DType::kF64) {
      const auto [begin, end] = chunks_[c];
      const std::uintptr_t row = static_cast<std::uintptr_t>(out_) * sizeof(double);
      issue.where = s == send_base_ + static_cast<std::uintptr_t>(T * begin) * row &&
                    y == y_base_ + static_cast<std::uintptr_t>(begin) * row &&
                    static_cast<std::int64_t>(info.count) == (end - begin) * out_;
      issue.rows = T * (end - begin);
      if (issue.where) {  // the layout is the contract's; only the T (e - b) rows this call was handed are read
        const auto* staging = static_cast<const double*>(send);
        const auto changes = static_cast<double>(c);  // x_step()s so far on the rows of x from here on
        for (std::int64_t i = 0; i < issue.rows; ++i) {
          const std::int64_t staged_row = T * begin + i;
          bool holds = true;
          for (std::int64_t j = 0; j < out_; ++j) {
            const double want = staged_[static_cast<std::size_t>(staged_row * out_ + j)] +
                                changes * step_[static_cast<std::size_t>(j)];
            holds = holds && std::abs(staging[i * out_ + j] - want) <= kTol * (1.0 + std::abs(want));
          }
          issue.rows_ready += holds ? 1 : 0;
        }
      }
      // The later chunks' rows of x change now (Note [The watch changes x]).
      const std::int64_t all_rows = static_cast<std::int64_t>(x_rows_.size());
      for (std::int64_t i = T * end; i < all_rows; ++i) x_step(x_ + x_rows_[static_cast<std::size_t>(i)] * in_, in_);
    }
    issue.previous_waited = c > 0 && waits_.waited[c - 1] != 0;
    issues.push_back(issue);
    waits_.waited.push_back(0);
    return chunk_work(inner().reduce_scatter(send, recv, info.count, info.dtype, info.op), info, &waits_, c);
  }

 private:
  std::vector<double> staged_;
  std::int64_t out_;
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks_;
  std::vector<std::int64_t> x_rows_;
  double* x_;
  std::int64_t in_;
  std::vector<double> step_;
  std::uintptr_t send_base_ = 0, y_base_ = 0;
  ChunkWaits waits_;
};

/// One sequence-parallel forward of `sequences` sequences of `length` tokens in `chunks` chunks
/// behind a StagingWatch: each chunk a reduce-scatter of its blocks, in order, issued with its
/// rows computed and the later chunks' not yet, received in place.
inline void check_sp_chunks(std::int64_t sequences, std::int64_t length, int chunks) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t in = 2 * T, out = 3, local_in = in / T, s = length / T, n = sequences * s;
  auto full = random_linear("proj", in, out, true, 27);
  const nn::Tensor x_mine =
      tensor_of({sequences, length, local_in}, column_slice(random_tensor({sequences, length, in}, 28), T, r));
  // The test's own product x_r W_r^T (plain loops), one row per token of every sequence.
  const std::vector<double> w = column_slice(full->weight().value, T, r), xv = values(x_mine);
  auto product = [&](std::int64_t token_row, std::int64_t j) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < local_in; ++i) {
      sum += xv[static_cast<std::size_t>(token_row * local_in + i)] * w[static_cast<std::size_t>(j * local_in + i)];
    }
    return sum;
  };
  // The contract's layout: chunk [b, e) at staged rows [T b, T e), block q (rank q's rows [b, e)) after block q - 1.
  const std::int64_t k = std::min<std::int64_t>(chunks, n);
  std::vector<std::pair<std::int64_t, std::int64_t>> cuts;
  std::vector<double> staged(static_cast<std::size_t>(T * n * out), 0.0);
  std::vector<std::int64_t> x_rows(static_cast<std::size_t>(T * n), 0);
  for (std::int64_t c = 0; c < k; ++c) {
    const std::int64_t b = c * n / k, e = (c + 1) * n / k;
    cuts.emplace_back(b, e);
    for (std::int64_t q = 0; q < T; ++q) {
      for (std::int64_t i = b; i < e; ++i) {
        const std::int64_t token_row = (i / s) * length + q * s + i % s;  // rank q's row i of y: a token of x
        const std::int64_t staged_row = T * b + q * (e - b) + i - b;
        x_rows[static_cast<std::size_t>(staged_row)] = token_row;
        for (std::int64_t j = 0; j < out; ++j) {
          staged[static_cast<std::size_t>(staged_row * out + j)] = product(token_row, j);
        }
      }
    }
  }
  StagingWatch watch(tp.record, staged, out, cuts, x_rows, x_mine.data<double>(), local_in,
                     product_of_step(w, out, local_in));
  auto layer = overlapped_of(*full, watch, T, r, chunks, true);
  tp.record.clear();
  layer->forward(x_mine);

  const std::string what = std::to_string(sequences) + " sequences of " + std::to_string(length) + " tokens in " +
                           std::to_string(chunks) + " chunks, rank " + std::to_string(r) + " of " + std::to_string(T);
  const auto& ops = tp.record.ops();
  EXPECT_EQ(static_cast<std::int64_t>(ops.size()), k)
      << what << ": one reduce-scatter per chunk, min(chunks, B S/T) of them; issued " << describe(tp.record);
  if (static_cast<std::int64_t>(watch.issues.size()) != k) return;
  for (std::size_t c = 0; c < watch.issues.size(); ++c) {
    const StagingWatch::Issue& issue = watch.issues[c];
    EXPECT_EQ(ops[c].kind, CollectiveKind::kReduceScatter) << what;
    EXPECT_TRUE(issue.where) << what << ": chunk " << c << " (rows [" << cuts[c].first << ", " << cuts[c].second
                             << ") of y) is not a reduce-scatter of " << (cuts[c].second - cuts[c].first) * out
                             << " elements from rows [T b, T e) of the staging buffer into rows [b, e) of y"
                             << " (b, e: the chunk's rows; the layout of lab08/overlapped_linear.h)";
    if (!issue.where) continue;
    EXPECT_EQ(issue.rows_ready, issue.rows) << what << ": at the issue of chunk " << c << "'s reduce-scatter, only "
                                            << issue.rows_ready << " of its " << issue.rows
                                            << " staged rows hold the product rows that become rank q's rows of y,"
                                            << " from x as it is now (the test changes the later chunks' rows of x"
                                            << " after each issue: a chunk's rows of x may be read only once the"
                                            << " chunk before it is issued, so a GEMM run ahead of the previous"
                                            << " chunk's reduce-scatter shows here)";
    EXPECT_FALSE(issue.previous_waited) << what << ": chunk " << c - 1 << "'s reduce-scatter was waited for (or"
                                        << " its test() polled until it finished) before chunk " << c << "'s was"
                                        << " issued: the link idled while chunk " << c << " was multiplied (nothing"
                                        << " overlaps)";
  }
}

}  // namespace lab08_test
