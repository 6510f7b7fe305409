// Lab 05, task D: PowerSGD, rank-r gradient compression with error feedback.
//
// What this file teaches: a gradient average that sends (n + m) r numbers per
// n x m matrix instead of n m, and why it still trains: one step of power
// iteration per training step finds the top-r subspace of the mean gradient,
// and error feedback sends later what the rank-r picture left out. See Note
// [PowerSGD] in lab05/powersgd.h for the steps and the invariant.
//
// Shapes, for one compressed matrix (row-major, as the flat gradient holds it):
//     M  n x m    this rank's gradient plus its error      grads + offset
//     P  n x r    M Q, summed over the ranks, orthonormal  packed in `ps`
//     Q  m x r    M^T P, averaged over the ranks           packed in `qs`, then q_[i]
//     e  n x m    M - P Q_w^T, this rank's                 error_[i]
//
// Communication per call: one f32 allreduce of every P, one of every Q, one of
// the uncompressed gradients. That is PyTorch's batching too (its hook packs
// the P's and the Q's of a bucket into one tensor each). With more power
// iterations, one more P and one more Q allreduce per round; in the warm-up and
// at an error reset, one allreduce of the whole gradient, in fp32 or bf16 (Notes
// [Warm-up and power iterations] and [Error reset]).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab05/powersgd.h"

namespace dtl::lab05 {

void orthonormalize_columns(float* a, std::int64_t rows, std::int64_t cols) {
  DTL_REQUIRE_ARG(rows >= 0, "orthonormalize_columns", "rows", "is " + std::to_string(rows) + ", must be >= 0");
  DTL_REQUIRE_ARG(cols >= 0, "orthonormalize_columns", "cols", "is " + std::to_string(cols) + ", must be >= 0");
  DTL_REQUIRE_ARG(rows * cols == 0 || a != nullptr, "orthonormalize_columns", "a",
                  "is null for a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  // TODO(student): On return the columns of the row-major rows x cols matrix `a` are orthonormal, made
  //   in column order as the header says: column j keeps only its part orthogonal to the
  //   columns before it (as they are on return), scaled to norm 1; a column left with norm
  //   exactly 0 stays 0. fp32 arithmetic in a fixed order, so equal inputs give equal bits
  //   on every rank (handout Task D, Hint 2).
  throw dtl::NotImplemented("orthonormalize_columns");
}

void PowerSgd::average(Communicator& backend, float* grads, std::size_t count) {
  DTL_REQUIRE_ARG(count == count_, "PowerSgd::average", "count",
                  "is " + std::to_string(count) + "; the layout holds " + std::to_string(count_) +
                      " elements: hand over the whole gradient as one bucket");
  DTL_REQUIRE_ARG(count == 0 || grads != nullptr, "PowerSgd::average", "grads", "is null");
  // TODO(student): On return every rank's grads holds the same compressed mean of Note [PowerSGD]: each
  //   compressed matrix i (ranks_[i] > 0, at offsets_[i], layout_[i], Q in q_[i], this rank's
  //   error in error_[i]) is replaced by its rank-r picture (P times Q transposed) after error
  //   feedback, options_.power_iterations power-iteration steps from q_[i], each with
  //   orthonormalize_columns() and the Q's averaged; q_[i] and error_[i] updated for the next
  //   call. Every other matrix is averaged exactly. A call with exact_call(step) true (steps_
  //   counts every call) is one exact average of the whole gradient instead, in
  //   options_.exact_dtype: in the warm-up Q and errors untouched, at an error reset the
  //   errors added first and then zeroed. Over `backend`: one f32 allreduce per transfer (a
  //   bf16 sum for bf16 exact calls), bytes_at_step() bytes in all, each waited for before
  //   returning. See Notes [Warm-up and power iterations] and [Error reset], and handout
  //   Task D, Hints 1-3.
  throw dtl::NotImplemented("PowerSgd::average");
}

}  // namespace dtl::lab05
