/// @file
/// @brief Lab 05, task D: PowerSGD, rank-r gradient compression with error feedback,
/// as a DDP communication hook (StepHooks::average in lab05/mixed.h).
///
/// 16-bit communication (tasks A-C) halves the bytes of the gradient average.
/// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
/// Compression for Distributed Optimization", NeurIPS 2019) sends, for an n x m
/// weight gradient, two thin matrices P (n x r) and Q (m x r) instead: (n + m) r
/// numbers in place of n m, a few percent of them at r = 1..4. What the
/// compression leaves out is kept on each rank (error feedback) and added to the
/// next step's gradient, so nothing is lost for good, only late.
///
/// Task D (powersgd.cc): orthonormalize_columns() and PowerSgd::average().
/// Given (given/powersgd_state.cc): the constructor (its checks and the first Q),
/// the layout of a model, and the hook that puts PowerSgd into a MixedPrecisionTrainer.
///
/// See Note [PowerSGD] below; the handout (Task D) refers to it.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/nn/model.h"
#include "lab05/mixed.h"

namespace dtl::lab05 {

// Note [PowerSGD]
// ~~~~~~~~~~~~~~~
// Every rank holds its gradient M_w of one weight, an n x m matrix; the step needs
// their mean. One power iteration finds a rank-r matrix close to it, with two
// small allreduces:
//
//     M_w  = G_w + e_w                    this step's gradient plus what was left out before
//     P    = sum_w M_w Q                  n x r; Q (m x r) is the same on every rank
//     P    = orthonormalize(P)            Gram-Schmidt: P^T P = I (on every rank alike)
//     Q_w  = M_w^T P                      m x r, this rank's part
//     e_w  = M_w - P Q_w^T                what this rank's rank-r picture leaves out: kept
//     Q    = (1/W) sum_w Q_w              the second allreduce
//     mean ~ P Q^T                        = P P^T mean_w(M_w): the mean projected on span(P)
//
// Q is kept for the next step (a warm start: one power-iteration step per
// training step follows the gradient's slowly turning top subspace); the first
// Q is a fixed pseudo-random matrix (initial_q()), the same on every rank.
//
// Why the error feedback: P P^T drops the mean's part outside span(P), every
// step. Added to the next gradient, the dropped part is sent later instead of
// never. Summed over steps, on every rank,
//
//     sum_t G_w,t = sum_t P_t Q_w,t^T + e_w,T            (the e's telescope)
//
// so what was sent differs from what was computed by one step's leftover, e_w,T,
// however many steps run. Without it PowerSGD at rank 1-2 trains visibly worse
// (Vogels et al., Table 3).
//
// Which gradients are compressed: a parameter of shape (d0, d1, ...) is the
// matrix d0 x (d1 ...). A vector (bias, LayerNorm gain) is n x 1, and matrices
// with fewer than PowerSgdOptions::min_compress_elements elements are tiny:
// these are averaged uncompressed (exactly, in fp32). Their bytes are small, and
// a rank-r picture of a vector is the vector anyway.
//
// The rank: r <= 0 is refused. r > min(n, m) is clamped to min(n, m) per matrix,
// since one r serves a model whose matrices differ (10 x 512 and 512 x 512);
// at r = min(n, m) the picture is exact while Q has full rank: P spans the mean's
// column space, and nothing is left out on average (sum_w e_w = 0). (A Q warm-started
// from a mean of lower rank than r has that lower rank; then error feedback sends
// the rest later.)
//
// Bytes per step, in fp32: sum over compressed matrices of (n + m) r, plus every
// uncompressed element, times 4 (times PowerSgdOptions::power_iterations for the
// (n + m) r part: Note [Warm-up and power iterations]). PyTorch's powerSGD_hook
// differs in two ways:
// it keeps e_w = M_w - P Q^T with the averaged Q (here: this rank's own Q_w, as
// Vogels et al.'s Algorithm 2; both leave sum_w e_w the same), and it works on
// the tensors of each bucket (here: the whole gradient is one bucket).

// Note [Warm-up and power iterations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Two knobs of practice, both off by default (the plain step above):
//
// Warm-up (PowerSgdOptions::warmup_steps = K; PyTorch's start_powerSGD_iter, the
// reference code's start_compressing_after_num_steps). Calls 0 .. K-1 of
// average() are an exact fp32 average of the whole gradient: one allreduce of all
// `count` floats, fp32's bytes; Q and the errors are not touched, so call K is the
// plain step's first call (Q = initial_q(), zero errors). The first steps of a
// training run are the ones a rank-r picture serves worst: Q starts random and
// needs steps to turn toward the gradient's top subspace, and what error feedback
// holds back arrives late just while the loss falls fastest. A few uncompressed
// steps cost K times fp32's bytes once; over T steps the run sends on average
// (K fp32 + (T - K) compressed) / T.
//
// Power iterations (PowerSgdOptions::power_iterations = I >= 1; the reference
// code's num_iters_per_step). Each call runs I power-iteration steps on the same
// M = G + e: before the step above, I - 1 rounds of
//
//     P = orthonormalize(sum_w M_w Q);   Q = (1/W) sum_w M_w^T P
//
// each with its two allreduces (P summed, Q averaged, as above), and keeps that Q;
// the last round is the step above (it sets e_w and the result). P then spans the
// mean's top-r subspace more closely (as I grows, P Q^T tends to the mean's best
// rank-r approximation when its r-th and (r+1)-th singular values differ); the
// price is I (n + m) r floats per matrix, and 1 + 2 I allreduces per call.

// Note [Error reset]
// ~~~~~~~~~~~~~~~~~~
// What error feedback holds back is sent late, never lost (Note [PowerSGD]). At rank
// 1-2 "late" is long: a direction waits in e until it is among M's top r, and the
// gradients of an MLP fed fresh inputs have dozens of directions of similar size. So
// the run lags fp32's by tens of steps, most of all early. An error reset sends the
// backlog at once, now and then (the idea of Xie et al., "CSER: Communication-efficient
// SGD with Error Reset", NeurIPS 2020; here the simplest form):
//
//   PowerSgdOptions::error_reset_period = F > 0: compressed calls F - 1, 2F - 1, ...
//   (counted from the first call after the warm-up) are exact: M_w = G_w + e_w is
//   averaged whole, the result is mean_w(M_w), and every e_w becomes 0. Q is kept.
//
// Nothing is lost: sum_t G_w,t = sum_t sent + e_w,T still holds, and right after a
// reset e_w,T = 0, so what was sent is then exactly what was computed.
//
// PowerSgdOptions::exact_dtype says what the exact calls (warm-up and resets) send:
// kF32 (one kAvg allreduce of `count` floats) or kBF16 (every element rounded to
// bf16, one kBF16 kSum allreduce of `count` elements, widened, divided by the world
// size in fp32): half the bytes, a rounding of relative size 2^-8 per element and
// addition. So a longer warm-up and resets fit a byte budget. What one call sends:
//
//     bytes_at_step(t) = count dtype_size(exact_dtype)   if exact_call(t)
//                      = bytes_per_step()                otherwise
//
// Measured on the benchmark's MLP (bench/RESULTS.md): rank 2, warm-up 10, 3 power
// iterations, a reset every 15 calls, both in bf16, sends 0.092x fp32's bytes over
// 150 steps and ends at 1.047x fp32's loss on the mean of eight data seeds at 2 ranks
// (1.049x without resets), 1.045x at 4 ranks (1.049x without): no gain beyond the
// metric's noise (about 2% for one seed). An option to study, not a fix.

/// @brief One gradient seen as a matrix: rows x cols, row-major, in the flat gradient.
struct MatrixShape {
  std::int64_t rows = 0;  ///< n: the parameter's first dimension
  std::int64_t cols = 0;  ///< m: the product of the others (1 for a vector)
};

/// @brief The model's parameters as matrices, in the flat order of model.parameters().
///
/// A parameter of shape (d0, d1, ..., dk) is d0 x (d1 ... dk); a 1-D one is d0 x 1.
/// @param[in] model the model.
/// @return one shape per parameter.
std::vector<MatrixShape> matrix_layout(const nn::Model& model);

/// @brief PowerSGD's parameters (Note [PowerSGD]).
struct PowerSgdOptions {
  int rank = 2;                              ///< r: the columns of P and Q; > 0, clamped to min(n, m) per matrix
  std::int64_t min_compress_elements = 256;  ///< matrices with fewer elements (and vectors) go uncompressed; >= 0
  std::uint64_t seed = 2019;                 ///< the first Q (initial_q()); the same on every rank
  int warmup_steps = 0;      ///< calls of average() that send the whole gradient uncompressed first; >= 0 (Note [Warm-up and power iterations])
  int power_iterations = 1;  ///< power-iteration steps per call; >= 1 (Note [Warm-up and power iterations])
  int error_reset_period = 0;       ///< every this-many-th compressed call is exact and zeroes the errors; >= 0, 0: never (Note [Error reset])
  DType exact_dtype = DType::kF32;  ///< what the exact calls (warm-up, resets) send: kF32 or kBF16 (Note [Error reset])
};

/// @brief The first Q's element (row, col) of matrix `matrix`: uniform in [-1, 1).
///
/// A hash of (seed, matrix, row, col) (splitmix64), so every rank makes the same Q
/// without communicating, and a test can make it too.
/// @param[in] seed PowerSgdOptions::seed. @param[in] matrix the index in the layout.
/// @param[in] row in [0, m). @param[in] col in [0, r).
/// @return the value.
float initial_q(std::uint64_t seed, std::size_t matrix, std::int64_t row, std::int64_t col);

/// @brief Makes the columns of a rows x cols matrix orthonormal, in place (Gram-Schmidt).
///
/// Column j (j = 0, 1, ...) loses its components along the columns before it (as they are
/// after their own turn) and is then divided by its norm. A column whose norm is then
/// exactly 0 stays 0 (a zero gradient gives a zero P). Computed in fp32 in column order,
/// so every rank that holds the same matrix gets the same bits.
/// @param[in,out] a rows x cols, row-major (element (i, j) at a[i * cols + j]).
/// @param[in] rows n >= 0. @param[in] cols r >= 0; the result has a^T a = I where no column is 0, when cols <= rows.
/// @throws dtl::InvalidArgument for negative sizes, or a null `a` with rows * cols > 0.
void orthonormalize_columns(float* a, std::int64_t rows, std::int64_t cols);

/// @brief PowerSGD's state and step: Q and the error feedback of every compressed matrix.
///
/// One object per trainer (per model), on every rank, built the same way.
class PowerSgd {
 public:
  /// @brief Sets up Q (initial_q()) and zero errors for the compressed matrices of `layout`.
  /// @param[in] layout the gradient's matrices in flat order (matrix_layout()).
  /// @param[in] options rank, the uncompressed rule, the seed.
  /// @throws dtl::InvalidArgument naming the argument (and this process's rank) for
  ///         options.rank <= 0, options.min_compress_elements < 0, options.warmup_steps < 0,
  ///         options.power_iterations < 1, options.error_reset_period < 0, options.exact_dtype
  ///         other than kF32 and kBF16, or a shape with rows or cols <= 0.
  PowerSgd(std::vector<MatrixShape> layout, PowerSgdOptions options);

  /// @brief Averages the flat fp32 gradient `grads` over the ranks of `backend`, compressed.
  ///
  /// For each compressed matrix, Note [PowerSGD]'s step: M += e; P = M Q; allreduce the
  /// P's (one f32 allreduce of all of them); orthonormalize_columns(P); Q_w = M^T P;
  /// e = M - P Q_w^T; allreduce the Q's (one f32 allreduce), Q = their mean; M = P Q^T.
  /// The uncompressed gradients are averaged exactly, by one f32 allreduce of all of them.
  /// So at most three f32 allreduces, of bytes_per_step() bytes in all, waited for before
  /// returning. Q and the errors are kept for the next call. Every rank ends with the same
  /// `grads`, the same Q; one rank's error is its own.
  ///
  /// Note [Warm-up and power iterations]: the first options.warmup_steps calls are one
  /// exact f32 averaging allreduce of all `count` floats instead, Q and errors untouched;
  /// with options.power_iterations = I, each compressed call runs I - 1 more rounds of
  /// (P, Q) first: at most 1 + 2 I allreduces. Note [Error reset]: a call with
  /// exact_call(steps()) true is one exact average of the whole gradient (plus the errors
  /// at a reset, which then become 0), in options.exact_dtype. Every call counts in steps(),
  /// and sends bytes_at_step(steps() before the call) bytes.
  ///
  /// Collective: every rank of `backend` must call it, with the same layout and count.
  /// @param[in] backend the ranks.
  /// @param[in,out] grads `count` floats: this rank's gradient in, the (compressed) mean out.
  /// @param[in] count must be the layout's elements (the whole gradient, one bucket).
  /// @throws dtl::InvalidArgument naming `count` (and the rank) otherwise, before communicating.
  void average(Communicator& backend, float* grads, std::size_t count);

  /// @brief This object as a StepHooks::average: a MixedPrecisionTrainer's gradient bucket
  /// (16-bit; an f32 buffer handed to it directly is average()d as it is) is widened to
  /// fp32, average()d, and rounded back.
  ///
  /// The trainer must hand it the whole gradient as one bucket (bucket_cap_bytes at least
  /// the gradient's bytes); the placement is moot (the sums are fp32, the divide is on Q).
  /// A trainer calls its hooks in fp16 and bf16 only (Precision::kF32 averages with its own
  /// f32 allreduce). The error feedback holds the gradients as they arrive, so use it with
  /// a constant loss scale (bf16 with ScalingMode::kNone, or ScalingMode::kStatic). This
  /// object must outlive the trainer.
  /// @return the hook.
  decltype(StepHooks::average) hook();

  /// @return the layout.
  const std::vector<MatrixShape>& layout() const noexcept { return layout_; }
  /// @return the options.
  const PowerSgdOptions& options() const noexcept { return options_; }
  /// @param[in] matrix index in the layout. @return its rank r (clamped), or 0 if it goes uncompressed.
  int rank_of(std::size_t matrix) const { return ranks_.at(matrix); }
  /// @param[in] matrix index in the layout. @return its Q (m x r, row-major; empty if uncompressed).
  const std::vector<float>& q(std::size_t matrix) const { return q_.at(matrix); }
  /// @param[in] matrix index in the layout. @return this rank's error feedback (n x m; empty if uncompressed).
  const std::vector<float>& error(std::size_t matrix) const { return error_.at(matrix); }
  /// @return the layout's elements (what average() takes).
  std::size_t count() const noexcept { return count_; }
  /// @return what one compressed average() sends, in bytes (fp32):
  ///         4 (I sum (n + m) r + uncompressed elements), I = options.power_iterations.
  std::size_t bytes_per_step() const noexcept;
  /// @param[in] step a call's index, from 0.
  /// @return what call `step` of average() sends, in bytes: count() dtype_size(options.exact_dtype)
  ///         for an exact call (the warm-up, an error reset: exact_call()), bytes_per_step() otherwise.
  std::size_t bytes_at_step(std::int64_t step) const noexcept;
  /// @param[in] step a call's index, from 0.
  /// @return whether call `step` of average() is exact: step < options.warmup_steps, or, with
  ///         F = options.error_reset_period > 0, (step - options.warmup_steps + 1) a multiple of F.
  bool exact_call(std::int64_t step) const noexcept;
  /// @return the calls of average() so far (warm-up included).
  std::int64_t steps() const noexcept { return steps_; }

 private:
  std::vector<MatrixShape> layout_;
  PowerSgdOptions options_;
  std::vector<std::size_t> offsets_;     // where each matrix starts in the flat gradient
  std::vector<int> ranks_;               // r of each matrix, 0 = uncompressed
  std::vector<std::vector<float>> q_;    // m x r per compressed matrix, the same on every rank
  std::vector<std::vector<float>> error_;  // n x m per compressed matrix, this rank's
  std::size_t count_ = 0;
  std::int64_t steps_ = 0;               // calls of average() so far
};

}  // namespace dtl::lab05
