/// @file
/// @brief Lab 08, task F: a row-parallel Linear layer whose allreduce (or, with sequence
/// parallelism, reduce-scatter) overlaps its own GEMM.
///
/// What this header holds: Note [Overlapping the row-parallel allreduce] (why g's
/// allreduce can start before the GEMM it reduces has finished, and how much of it
/// that hides, in closed form), Note [Overlapping the sequence-parallel
/// reduce-scatter] (the same for the reduce-scatter that leaves a sequence-parallel
/// pair, task F2) and OverlappedRowParallelLinear (its forward is your
/// src/overlapped_linear.cc; its constructor, backward and plumbing are given, in
/// given/overlapped_layer.cc). The plain layers are in lab08/parallel_linear.h.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/tensor.h"
#include "lab08/parallel_linear.h"

namespace dtl::lab08 {

// Note [Overlapping the row-parallel allreduce]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// RowParallelLinear computes the whole partial product x_r W_r^T, then
// allreduces it: the link idles while the GEMM runs, and the cores idle while
// the allreduce runs (Note [Why TP stays inside a node]). But the rows of y are
// independent: row i of the sum needs only row i of every rank's product. So cut
// the N rows into k chunks and pipeline them:
//
//     GEMM   [ rows 0 ][ rows 1 ][ rows 2 ][ rows 3 ]
//     link             [ AR 0 ]  [ AR 1 ]  [ AR 2 ]  [ AR 3 ]
//                                                    ^^^^^^^^ exposed: only the last
//
// chunk c's allreduce is issued as soon as chunk c is computed and runs while
// chunk c+1 is multiplied. This is the decomposition of Wang et al. (ASPLOS
// 2023, "Overlap communication with dependent computation via decomposition in
// large deep learning models"), and what PyTorch calls async tensor parallelism
// (there, for the all-gather and reduce-scatter of sequence parallelism).
//
// How much it hides, on the alpha-beta link (emulated_communicator.h: an
// allreduce of n bytes over T ranks takes 2(T-1)(alpha + n/(T B))): while each
// chunk's GEMM takes longer than its allreduce, everything but the last chunk's
// allreduce is hidden, so
//
//     hidden = 1 - exposed / plain = 1 - (alpha + n/(k T B)) / (alpha + n/(T B)).
//
// Bandwidth-bound (n/(T B) >> alpha) it approaches 1 - 1/k; latency-bound it
// approaches 0, because every chunk pays the full alpha and the last one is not
// hidden. At the benchmark's shapes (the MLP's output projection, N = 256 tokens,
// C = 128, f32, T = 2, n = 128 KiB): 10GbE (alpha 10 us, 1.25 GB/s) at k = 4,
// hidden <= 63%; NVLink4 (alpha 2 us, 450 GB/s), hidden <= 5%. What chunking
// costs: k collectives instead of one (k alphas on the link) and k smaller GEMMs.
// When a chunk's GEMM is shorter than its allreduce, the chunks queue on the link
// and those k alphas can expose more than one allreduce did (bench/RESULTS.md: T
// = 4 on 10GbE with k = 8). More chunks is not always better.
//
// The result does not change: each row of y is the same sum of the same T
// products. With integer-valued inputs (exact sums) it equals the plain layer
// bit for bit; in general within rounding (the backend may sum k small buffers
// in another order than one large one).

// Note [Overlapping the sequence-parallel reduce-scatter]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With sequence parallelism (Note [Sequence parallelism]) the row-parallel layer
// leaves with a reduce-scatter instead of an allreduce: rank q receives the sum of
// its own tokens only, tokens [q S/T, (q+1) S/T) of every sequence. The same
// decomposition applies, but a chunk of the product's rows in row order is no
// longer a valid reduce-scatter: the first N/k rows of (B, S, out) are all rank
// 0's tokens when N/k <= S/T, and the other ranks would receive nothing from that
// collective (or the wrong rows). A reduce-scatter hands block q of its input to rank q, so every
// chunk must hold a piece for every rank, the same size on every rank.
//
// So cut what each rank RECEIVES, not what it computes: this rank's n = B S/T
// rows of output, k chunks of consecutive rows, the same cut on every rank.
// Which product rows each chunk's reduce-scatter must then carry, and in which
// order, is the task (handout Task F2). Each chunk's reduce-scatter receives
// straight into its rows of the layer's output, in place; only its input needs
// a buffer in rank order. That buffer must live until the collective completes,
// so the k chunks' inputs lie one after another in one staging buffer of the
// whole product's size.
//
// How much it hides. A reduce-scatter of m bytes takes (T-1)(alpha + m/(T BW)) on
// the emulator's link (bandwidth BW), so the bound has the allreduce's form:
//
//     hidden = 1 - (alpha + m/(k T BW)) / (alpha + m/(T BW)),
//
// with the product's m bytes. At the benchmark's shapes (N = 256 tokens, C =
// 128, f32, T = 2, m = 128 KiB) on 10GbE at k = 4: hidden <= 63%; on NVLink4
// about 5%. A reduce-scatter takes half an allreduce's time, so a chunk's GEMM
// covers it more easily: the bound is reached on slower links than task F's.
//
// The column-parallel entry can be overlapped the same way, the other way round
// (collective matmul, Wang et al.): all-gather the input one rank's block at a
// time and multiply the blocks already present. That is an exercise (README).

/// @brief A RowParallelLinear whose forward overlaps its allreduce with its GEMM
/// (Note [Overlapping the row-parallel allreduce]).
///
/// x_r (N..., in/T) is this rank's slice of the input features; y (N..., out) =
/// allreduce over the group of x_r W_r^T, plus the whole bias (replicated), as
/// RowParallelLinear (Note [f and g]). The N rows (every dimension but the last,
/// flattened) are cut into min(k, N) chunks of consecutive rows, in row order,
/// whose sizes differ by at most one row; chunk c's allreduce is issued as soon
/// as its rows of the product are computed, in place in the layer's output, before
/// the next chunk's GEMM begins, and none is waited for (nor its test() polled until
/// it completes) before the next chunk's is issued; a chunk's rows of x are read only
/// once the chunk before it is issued (the tests change the later rows of x at each
/// issue, so a product computed early is stale). Backward: as RowParallelLinear's, no
/// communication.
///
/// With sequence parallelism (task F2, Note [Overlapping the sequence-parallel
/// reduce-scatter]) x_r is (B, S, in/T) for the whole sequences and y is this rank's
/// tokens of every sequence, (B, S/T, out), summed over the group, plus the bias, as
/// RowParallelLinear's with ParallelOptions::sequence_parallel. This rank's n = B S/T
/// rows of y are cut into k' = min(k, n) chunks of consecutive rows, in row order:
/// chunk c is rows [b, e) = [c n / k', (c + 1) n / k') (integer division), the same
/// cut on every rank, so that the tests know each chunk; chunk c is one
/// reduce-scatter of (e - b) x out elements per rank, issued as soon as its T blocks
/// are computed and before the next chunk's GEMMs begin; it sends from rows [T b,
/// T e) of one staging buffer of (T n, out) in x's dtype (ensure_staging(),
/// kCommunication; block q, the product rows that become rank q's rows [b, e), is
/// rows [T b + q (e - b), T b + (q + 1)(e - b))) and receives in place into rows
/// [b, e) of y; none is waited for (nor polled until it completes) before the next
/// chunk's is issued, and the rows of x that any of a chunk's T blocks multiply are
/// read only once the chunk before it is issued (as above: the tests change them).
/// All are waited for before the bias is added, once. Backward (given): one all-gather of dy; db covers this
/// rank's tokens only, as RowParallelLinear's.
///
/// Collective over `tp` in forward (and, with sequence parallelism, in backward):
/// every rank of the group calls it together, with the same N (or B and S) and k.
class OverlappedRowParallelLinear : public nn::Layer {
 public:
  /// @brief A layer holding this rank's slice of a row-parallel weight and the whole bias (given).
  ///
  /// The caller slices (the tests with their own oracle; make_overlapped() from a
  /// RowParallelLinear): this constructor copies and checks, it does not communicate.
  /// @param[in] name the layer's name; parameters are name.weight and name.bias.
  /// @param[in] weight this rank's columns of the full weight, (out, in/T), f32 or f64.
  /// @param[in] bias the whole bias (out) of the weight's dtype, or an undefined tensor for none.
  /// @param[in] tp the tensor-parallel group; must outlive the layer.
  /// @param[in] chunks k >= 1, the row chunks of forward.
  /// @param[in] sequence_parallel whether y is split along the sequence (task F2).
  /// @throws dtl::InvalidArgument naming "chunks" and the tensor-parallel rank if k < 1;
  ///         naming "weight" or "bias" if their shapes or dtypes do not fit.
  OverlappedRowParallelLinear(std::string name, const nn::Tensor& weight, const nn::Tensor& bias,
                              Communicator& tp, int chunks, bool sequence_parallel = false);
  /// @brief "OverlappedRowParallelLinear".
  /// @return the kind.
  std::string kind() const override { return "OverlappedRowParallelLinear"; }
  /// @brief y (N..., out) = sum over the group of x_r W_r^T, + b, allreduced chunk by chunk
  /// while the next chunk is computed (your src/overlapped_linear.cc); with sequence
  /// parallelism, this rank's tokens of y, reduce-scattered chunk by chunk.
  /// @param[in] x this rank's slice x_r of the input features, (N..., in/T).
  /// @return y, in a buffer of the layer's own; the same on every rank (with sequence
  ///         parallelism: this rank's tokens, (B, S/T, out)).
  /// @throws dtl::InvalidArgument naming "x" if its dtype or last dimension does not fit,
  ///         or, with sequence parallelism, if it has fewer than 2 dimensions or T does not divide S.
  const nn::Tensor& forward(const nn::Tensor& x) override;
  /// @brief Accumulates db and dW_r; returns dx_r = dy W_r (given; no communication, except
  /// with sequence parallelism one all-gather of dy's tokens).
  /// @param[in] dy the shape of forward's y.
  /// @param[in] grad_ready fired for bias, then weight.
  /// @return dx_r (N..., in/T).
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) override;
  /// @brief weight (out, in/T), then bias (out) if any.
  /// @return the parameters.
  std::vector<nn::Parameter*> parameters() override;
  /// @brief (N..., in/T) -> (N..., out); with sequence parallelism (..., S, in/T) -> (..., S/T, out).
  /// @param[in] input the input shape.
  /// @return the output shape.
  nn::Shape output_shape(const nn::Shape& input) const override;
  /// @brief Frees one slot's caches.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }
  /// @brief k, the row chunks of forward.
  /// @return it.
  int chunks() const noexcept { return chunks_; }
  /// @brief Whether y is split along the sequence (task F2).
  /// @return it.
  bool sequence_parallel() const noexcept { return sequence_parallel_; }

 private:
  struct Cache {
    nn::Tensor x;   // forward's input (a handle): backward needs it for dW
    nn::Tensor y;   // the reduced output (plus bias)
    nn::Tensor dx;  // backward's result
    nn::Tensor staging;   // sequence parallelism: the chunks' reduce-scatter inputs in rank order (kCommunication)
    nn::Tensor gathered;  // sequence parallelism: dy with every rank's tokens, (B, S, out)
  };
  // Sequence parallelism, given: dy's tokens all-gathered into cache.gathered, in sequence order.
  const nn::Tensor& gather_dy(const nn::Tensor& dy, Cache& cache);
  // output_shape() with or without the sequence split.
  nn::Shape output_shape_for(const nn::Shape& input, bool split) const;
  Communicator& tp_;
  int chunks_;
  bool sequence_parallel_;
  std::int64_t in_, out_;  // this rank's input features (in/T), the output features
  bool has_bias_;
  nn::Parameter weight_, bias_;
  nn::SlotCaches<Cache> caches_;
};

/// @brief An OverlappedRowParallelLinear with a RowParallelLinear's slice and bias (given).
/// @param[in] row the layer to copy (its parameters(): weight, then bias).
/// @param[in] tp its tensor-parallel group.
/// @param[in] chunks k >= 1.
/// @param[in] sequence_parallel whether y is split along the sequence (as row's options say; task F2).
/// @return the new layer, with row's name.
/// @throws dtl::InvalidArgument as the constructor.
std::unique_ptr<OverlappedRowParallelLinear> make_overlapped(RowParallelLinear& row, Communicator& tp, int chunks,
                                                             bool sequence_parallel = false);

}  // namespace dtl::lab08
