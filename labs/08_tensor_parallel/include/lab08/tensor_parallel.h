/// @file
/// @brief Lab 08 — tensor parallelism: the API you implement in src/.
///
/// Data parallelism copies the whole model onto every rank; pipelines cut it
/// between layers. Tensor parallelism (Megatron-LM, Shoeybi et al., 2019) cuts
/// *inside* each layer: every weight matrix is split across the T ranks of a
/// tensor-parallel group, each rank multiplies by its slice, and a collective
/// puts the pieces together. Parameters, gradients and optimizer state shrink
/// by T; the price is one allreduce of an activation per split layer pair, in
/// forward and again in backward, on the critical path. This lab builds, on the
/// training core (harness/nn) and the Communicator interface (harness/comm):
///
///   - Task A (parallel_linear.cc): ColumnParallelLinear (weight split by output
///     features; forward has no communication, backward allreduces dx) and
///     RowParallelLinear (split by input features; forward allreduces y) — the
///     conjugate operators f and g of Note [f and g];
///   - Task B (blocks.cc): the Megatron MLP block (column then row: one
///     allreduce forward, one backward) and attention with its heads split
///     across the ranks (ParallelSelfAttention: qkv column-parallel, proj
///     row-parallel);
///   - Task C (vocab_parallel.cc): the vocabulary-parallel embedding and a
///     cross-entropy that never gathers the full logits (VocabParallelEmbedding,
///     VocabParallelCrossEntropy);
///   - Task D (the sequence_parallel branches of task A, and sequence_parallel.cc's
///     allreduce_sequence_parallel_gradients()): sequence parallelism, where the
///     LayerNorm/dropout regions keep 1/T of the rows and each allreduce becomes
///     a reduce-scatter plus an all-gather;
///   - TP x DP: tensor parallel inside a group of T consecutive ranks, data
///     parallel across the groups, on lab 07's grid (lab07/grid.h: your lab-07
///     make_grid() with T as the model size, and allreduce_data_parallel_gradients();
///     this lab links lab 07's library, as lab 04 links lab 03's).
///
/// and, given (labs/08_tensor_parallel/given/, compiled into both builds, not yours to edit):
///   - tp_util.cc   shard_range() (the one place a size is split and refused),
///                  round_up(), and make_tensor_parallel_gpt(), which builds a
///                  GPT's tensor-parallel copy from your layers and blocks;
///   - layer_helpers.{h,cc}  the layers' size checks, bias helpers, output shapes,
///                  activation slots and parameter lists around your passes.
///
/// See Note [Tensor parallelism], Note [f and g], Note [Splitting a fused
/// projection], Note [Heads split], Note [Vocabulary parallel], Note [Sequence
/// parallelism], Note [Communication and memory per layer], Note [TP x DP] and
/// Note [Why TP stays inside a node] below; the handout and the slides refer to them.
///
/// Every layer here is built *from the unsplit layer* of harness/nn (the same
/// seed on every rank gives the same full model; each rank keeps its slice), so
/// a tensor-parallel model computes exactly what the full model computes, up to
/// the order of floating-point sums.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/tensor.h"
#include "lab07/grid.h"

namespace dtl::lab08 {

// Note [Tensor parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A Linear layer computes y = x W^T + b with W of shape (out, in). Split W
// across T ranks in one of two ways:
//
//   by output features (rows of W):  rank r holds W_r = W[r out/T : (r+1) out/T, :]
//       y_r = x W_r^T + b_r is rank r's slice of y's columns. Every rank needs
//       the whole x and gets 1/T of y's features. COLUMN-parallel (Megatron
//       names it after the columns of W^T).
//   by input features (columns of W): rank r holds W_r = W[:, r in/T : (r+1) in/T]
//       x_r W_r^T is a partial sum: y = sum_r x_r W_r^T + b. Every rank needs its
//       slice x_r of x's features and the ranks must add their results.
//       ROW-parallel.
//
// A column-parallel layer's output is exactly the input a row-parallel layer
// wants: y_r of the first is x_r of the second. So a pair (column, then row)
// needs no communication in the middle, and an elementwise function (GELU)
// between them runs on the slices. The only communication is where the pair is
// entered and left (Note [f and g]).

// Note [f and g]
// ~~~~~~~~~~~~~~
// Megatron writes the communication of a column/row pair as two operators that
// are each other's transpose (conjugate):
//
//            forward                  backward
//     f      identity (x is copied)   allreduce(dx)   -- entering the pair
//     g      allreduce(y)             identity        -- leaving the pair
//
// Why f's backward allreduces: every rank used the same x, each through its own
// W_r, so dL/dx = sum_r dy_r W_r — each rank holds one term. Why g's backward is
// the identity: y = sum_r y_r, so dL/dy_r = dL/dy, which every rank already has.
// ColumnParallelLinear carries f (no communication forward, one allreduce of dx
// backward); RowParallelLinear carries g (one allreduce of y forward, none
// backward). The bias of a row-parallel layer is added once, after the
// allreduce, so it is replicated (every rank holds all of it); the bias of a
// column-parallel layer is split with its rows.
//
// The test Comm.ColumnBackwardAllreducesDx counts the operations: a column
// layer that forgets its backward allreduce gives each rank 1/T of dx (wrong
// by the other ranks' terms); one that allreduces y in forward adds T copies
// of different features together.

// Note [Splitting a fused projection]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Attention's input projection is one Linear(C, 3C) whose output rows are
// [q | k | v], each C rows of heads side by side. Cutting its 3C rows into T
// contiguous pieces would give rank 0 all of q and some of k: useless. Cut
// each of the `groups` = 3 blocks into T pieces instead and give rank r piece r
// of every block:
//
//     full rows   [ q0 q1 | k0 k1 | v0 v1 ]        (T = 2, each qi/ki/vi C/2 rows)
//     rank 0      [ q0 | k0 | v0 ]                 (3C/2 rows, heads 0 .. NH/2-1)
//     rank 1      [ q1 | k1 | v1 ]
//
// Rank r's output is again [q | k | v] for its NH/T heads, the layout the
// attention core expects. ColumnParallelLinear takes `groups` for this (1 for
// an ordinary layer); the bias is cut the same way.

// Note [Heads split]
// ~~~~~~~~~~~~~~~~~~
// Attention heads are independent of each other until the output projection
// mixes them: out = [head_0 | head_1 | ...] W_proj^T. So give each rank NH/T
// whole heads: qkv column-parallel with groups = 3 (Note [Splitting a fused
// projection]), the attention core on the rank's heads alone (no
// communication: the softmax is within a head), and proj row-parallel, whose
// input slice x_r is exactly the rank's heads. Attention is then a column/row
// pair like the MLP: one allreduce forward, one backward. NH must be divisible
// by T. The (B, NH, T, T) attention weights, the largest activation of a
// transformer at long context, shrink by T as well.

// Note [Vocabulary parallel]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The embedding table (V, C) and the output layer (C -> V) are a GPT's largest
// matrices when V is large (GPT-2: V = 50257, C = 768: 38.6 M parameters each).
// Split both by vocabulary: rank r owns tokens [r V/T, (r+1) V/T).
//
// Embedding: each rank looks up the tokens it owns and writes zeros for the
// others; an allreduce (sum) of the (B, T, C) result gives every rank the full
// embedding (exactly one rank contributed each row). Backward: every rank has
// the whole dy and adds the rows of its own tokens into its slice: no
// communication.
//
// Cross-entropy: the output layer is column-parallel, so rank r holds logits
// z_r (N, V/T) for its tokens. Gathering the full (N, V) logits would cost N V
// values per rank — at V = 50257 far more than the whole hidden state. Instead
// the loss of each row is assembled from a few numbers per row and rank: one
// all-gather of N values and one allreduce (sum) of 2N values per forward
// (T N + 2 N values instead of T N V/T), and the gradient of each rank's columns
// is then computed locally, with no communication. Which numbers: lab 08's task C
// (the handout's hints). Two constraints shape the answer: the Communicator
// reduces with sum and average only, and exp() of a logit of 1000 overflows.
//
// V must be divisible by T. Real vocabularies rarely are: Megatron pads V up to
// a multiple of 128 T with tokens that never occur (round_up()). The padded
// logits are real outputs of the model (they take probability mass, and the
// loss accounts for it); they are simply never targets.

// Note [Sequence parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Between the pairs (LayerNorm, dropout, the residual adds) plain tensor
// parallelism computes the same thing on every rank, on the whole activation:
// T copies of the work and of the memory. Sequence parallelism (Korthikanti et
// al., 2022) splits those regions by rows instead: each rank keeps 1/T of the
// rows (dimension 0 of the activation). Entering a column-parallel layer, an
// all-gather collects the rows; leaving a row-parallel layer, a reduce-scatter
// both sums the partial results and hands each rank its rows:
//
//                      forward           backward
//     enter (column)   all-gather x      reduce-scatter dx     (replaces f)
//     leave (row)      reduce-scatter y  all-gather dy         (replaces g)
//
// An allreduce *is* a reduce-scatter followed by an all-gather (lab 03), so the
// bytes on the wire are the same as without sequence parallelism; what is saved
// is the activation memory and the work of the row-wise regions, by T.
// Megatron lays activations out as (T, B, C), so dimension 0 is the sequence;
// our layers take (B, T, C) or (N, C), so here dimension 0 is the batch or the
// flattened rows. For row-wise operations it is the same: only which rows go
// together changes.
//
// The catch: a parameter used in the split region (LayerNorm's weight and bias,
// a row-parallel layer's bias) now sees only this rank's rows in backward. Its
// gradient on each rank is a partial sum; allreduce_sequence_parallel_gradients()
// adds the partial sums over the tensor-parallel group before the optimizer step.

// Note [Communication and memory per layer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// N rows (B T), C channels, T tensor-parallel ranks, 4-byte elements. Bytes are
// the whole buffer n of the cost formulas (OpInfo::total_bytes()).
//
//   layer                      forward             backward             parameters per rank
//   ColumnParallelLinear(i,o)  -                   allreduce N i        o i / T + o / T
//   RowParallelLinear(i,o)     allreduce N o       -                    o i / T + o
//   MLP block (C, 4C)          allreduce N C       allreduce N C        8 C^2 / T + 4C / T + C + 2C (LN)
//   attention block (C, NH)    allreduce N C       allreduce N C        4 C^2 / T + 3C / T + C + 2C (LN)
//   VocabParallelEmbedding     allreduce N C       -                    V C / T
//   VocabParallelCrossEntropy  all-gather N, allreduce 2N (f64)  -      -
//   with sequence parallelism: each allreduce of n bytes becomes an all-gather
//   and a reduce-scatter of n bytes each (one in forward, one in backward).
//
// The counts hold for every T, T = 1 included (a collective over a group of one
// is a copy): the tests compare the recorded operations with this table exactly.
// A GPT block therefore costs 2 allreduces of N C forward and 2 backward:
// 4 N C elements per block per step, whatever T is, on the critical path.
// With the ring (lab 03) each rank sends 2 (T-1)/T of each; the time is
// 4 * 2 (T-1)/T * 4 N C / bandwidth per block. See Note [Why TP stays inside a node].

// Note [TP x DP]
// ~~~~~~~~~~~~~~
// W = T x D ranks: D data-parallel replicas, each a tensor-parallel group of T
// consecutive ranks (consecutive: on a real machine they share a node and its
// NVLink). Rank w is tensor-parallel rank w mod T of replica w / T. Two
// sub-communicators per rank, from lab 07's make_grid(world, T) (lab07/grid.h):
// its tensor-parallel group, the grid's model_group (every layer's collectives;
// model_rank is the tensor-parallel rank), and its data_group (the ranks holding the
// *same slice* of every weight in the other replicas: the gradient average).
// Each replica takes 1/D of the batch; the T ranks of a replica read the same
// rows. After backward, every rank averages its (sliced) gradients over its
// data-parallel group (allreduce_data_parallel_gradients()): the gradient of a
// slice is averaged only with copies of the same slice. At 4 ranks, T = 2:
// tensor groups {0, 1} and {2, 3}, data groups {0, 2} and {1, 3}.
//
// 3D: put pipeline stages (lab 07) on top: W = T x P x D. Tensor parallel
// inside a node (allreduces of activations every layer), pipeline stages across
// nodes (point-to-point activations once per stage), data parallel outermost
// (one gradient allreduce per step, overlapped with backward). The handout
// works through a table of memory and communication for a concrete model.

// Note [Why TP stays inside a node]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Per GPT block and step, tensor parallelism moves 4 allreduces of N C
// elements, none of which can overlap the compute that needs its result. Data
// parallelism moves one allreduce of the block's 12 C^2 parameters per step,
// overlapped with backward. For N = 8192 tokens and C = 4096 a TP block moves
// 4 x 128 MiB (f32) every step; over NVLink (hundreds of GB/s) that is a few ms,
// over 10 GbE (1.25 GB/s) it is seconds — far longer than the block's compute.
// So tensor groups are the GPUs of one node and T is at most 8; pipeline and
// data parallelism cross the slower links. `./dtl bench 08` measures it on
// emulated links.

// ---------------------------------------------------------------------------
// Given: splitting sizes (tp_util.cc)
// ---------------------------------------------------------------------------

/// @brief One rank's slice of a dimension.
struct ShardRange {
  std::int64_t begin = 0;  ///< first index of the slice
  std::int64_t size = 0;   ///< its length
};

/// @brief Slice `index` of `parts` equal slices of a dimension of `size` (given).
///
/// The one place a size is split. Sizes that `parts` does not divide are refused,
/// not padded: an uneven split would give the ranks different shapes and the
/// collectives different counts. Pad the model instead (round_up()).
/// @param[in] size the dimension, >= 1.
/// @param[in] parts T >= 1.
/// @param[in] index r in [0, T).
/// @param[in] function named in the error, e.g. "ColumnParallelLinear".
/// @param[in] argument named in the error, e.g. "full" (and what of it: the message says the size).
/// @param[in] what what the dimension is, e.g. "output features".
/// @return {r size/T, size/T}.
/// @throws dtl::InvalidArgument naming function, argument, the size, T and the
///         tensor-parallel rank (and, as every dtl error, the world rank), if T does not divide size.
ShardRange shard_range(std::int64_t size, int parts, int index, const char* function, const char* argument,
                       const std::string& what);

/// @brief A copy of a LayerNorm, for every rank (given): replicated layers are copied whole.
/// @param[in] full the layer.
/// @return a new LayerNorm with the same name, weight and bias.
std::unique_ptr<nn::LayerNorm> copy_layer_norm(nn::LayerNorm& full);

/// @brief The smallest multiple of `multiple` that is >= value (given): a padded vocabulary.
/// @param[in] value >= 0.
/// @param[in] multiple >= 1.
/// @return the rounded value.
/// @throws dtl::InvalidArgument if multiple < 1 or value < 0.
std::int64_t round_up(std::int64_t value, std::int64_t multiple);

// ---------------------------------------------------------------------------
// Task A: column- and row-parallel Linear (parallel_linear.cc)
// ---------------------------------------------------------------------------

/// @brief How a tensor-parallel layer runs.
struct ParallelOptions {
  /// Note [Splitting a fused projection]: the output features are `groups` equal
  /// blocks, each split T ways (ColumnParallelLinear only; 1 for an ordinary layer, 3 for qkv).
  int groups = 1;
  /// Note [Sequence parallelism]: the layer's input (column) or output (row) is
  /// split by rows (dimension 0) across the group instead of replicated.
  bool sequence_parallel = false;
};

/// @brief A Linear layer whose weight is split by output features (Note [Tensor parallelism]).
///
/// x (N..., in) is the whole input on every rank (with sequence parallelism: this
/// rank's rows, (n0/T, ..., in), gathered first). y (N..., out/T) is this rank's
/// slice of the output features: with groups = g, piece r of each of the g
/// blocks of out/g features. Forward: no communication (all-gather of x with
/// sequence parallelism). Backward: dW_r, b_r as a Linear's; dx = allreduce over
/// the group of dy_r W_r (reduce-scatter with sequence parallelism).
///
/// Collective over `tp` in backward (and, with sequence parallelism, in forward):
/// every rank of the group calls them together.
class ColumnParallelLinear : public nn::Layer {
 public:
  /// @brief This rank's slice of `full` (same name, so the parameter names match).
  /// @param[in] full the unsplit layer (f32 or f64); read, not changed; may be destroyed afterwards.
  /// @param[in] tp the tensor-parallel group; must outlive the layer.
  /// @param[in] options groups and sequence parallelism.
  /// @throws dtl::InvalidArgument naming "full" and the tensor-parallel rank if
  ///         groups x T does not divide full's output features; naming "options" if groups < 1.
  ColumnParallelLinear(nn::Linear& full, Communicator& tp, ParallelOptions options = {});
  /// @brief "ColumnParallelLinear".
  /// @return the kind.
  std::string kind() const override { return "ColumnParallelLinear"; }
  /// @brief y_r (N..., out/T) from x (N..., in) (with sequence parallelism, x is (n0/T, ..., in)).
  /// @param[in] x the input.
  /// @return this rank's output features.
  const nn::Tensor& forward(const nn::Tensor& x) override;
  /// @brief Accumulates dW_r, db_r; returns dx summed over the group (f's backward).
  /// @param[in] dy (N..., out/T).
  /// @param[in] grad_ready fired for bias, then weight.
  /// @return dx, the shape of forward's x.
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) override;
  /// @brief weight (out/T, in), then bias (out/T) if any.
  /// @return the parameters.
  std::vector<nn::Parameter*> parameters() override { return local_.parameters(); }
  /// @brief (N..., in) -> (N..., out/T); with sequence parallelism (n0, ..., in) -> (n0 T, ..., out/T).
  /// @param[in] input the input shape.
  /// @return the output shape.
  nn::Shape output_shape(const nn::Shape& input) const override;
  /// @brief Selects the slot here and in the local layer.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees one slot here and in the local layer.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief The local layer: Linear(in, out/T) holding this rank's rows.
  /// @return it.
  nn::Linear& local() noexcept { return local_; }

 private:
  struct Cache {
    nn::Tensor gathered;  // sequence parallelism: x with every rank's rows
    nn::Tensor dx;        // sequence parallelism: this rank's rows of dx
  };
  Communicator& tp_;
  ParallelOptions options_;
  std::int64_t in_, out_;  // the full layer's features
  nn::Linear local_;
  nn::SlotCaches<Cache> caches_;
};

/// @brief A Linear layer whose weight is split by input features (Note [Tensor parallelism]).
///
/// x_r (N..., in/T) is this rank's slice of the input features (the output of a
/// column-parallel layer). y (N..., out) = allreduce over the group of x_r W_r^T,
/// plus the whole bias, which every rank holds (with sequence parallelism: a
/// reduce-scatter instead, y is this rank's rows (N/T, ..., out)). Backward: dx_r =
/// dy W_r, dW_r = dy^T x_r, db = sum of dy: no communication (with sequence
/// parallelism: dy's rows are all-gathered first, and db covers this rank's rows only).
///
/// Collective over `tp` in forward (and, with sequence parallelism, in backward).
class RowParallelLinear : public nn::Layer {
 public:
  /// @brief This rank's slice of `full`: weight columns [r in/T, (r+1) in/T), the whole bias.
  /// @param[in] full the unsplit layer; read, not changed.
  /// @param[in] tp the tensor-parallel group; must outlive the layer.
  /// @param[in] options sequence parallelism (groups must be 1).
  /// @throws dtl::InvalidArgument naming "full" and the tensor-parallel rank if T
  ///         does not divide full's input features; naming "options" if groups != 1.
  RowParallelLinear(nn::Linear& full, Communicator& tp, ParallelOptions options = {});
  /// @brief "RowParallelLinear".
  /// @return the kind.
  std::string kind() const override { return "RowParallelLinear"; }
  /// @brief y (N..., out) = sum over the group of x_r W_r^T, + b (g's forward).
  /// @param[in] x this rank's slice x_r of the input features, (N..., in/T).
  /// @return y (with sequence parallelism: this rank's rows of it).
  const nn::Tensor& forward(const nn::Tensor& x) override;
  /// @brief Accumulates db and dW_r; returns dx_r = dy W_r.
  /// @param[in] dy the shape of forward's y.
  /// @param[in] grad_ready fired for bias, then weight.
  /// @return dx_r (N..., in/T).
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) override;
  /// @brief weight (out, in/T), then bias (out) if any.
  /// @return the parameters.
  std::vector<nn::Parameter*> parameters() override;
  /// @brief (N..., in/T) -> (N..., out); with sequence parallelism (n0, ...) -> (n0/T, ..., out).
  /// @param[in] input the input shape.
  /// @return the output shape.
  nn::Shape output_shape(const nn::Shape& input) const override;
  /// @brief Selects the slot here and in the local layer.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees one slot here and in the local layer.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief The bias (out), replicated on every rank; undefined tensors without bias.
  /// @return the parameter.
  nn::Parameter& bias() noexcept { return bias_; }

 private:
  struct Cache {
    nn::Tensor y;         // the reduced output (plus bias)
    nn::Tensor gathered;  // sequence parallelism: dy with every rank's rows
  };
  Communicator& tp_;
  ParallelOptions options_;
  std::int64_t in_, out_;  // the full layer's features
  bool has_bias_;
  nn::Linear local_;       // Linear(in/T, out) without bias: this rank's columns
  nn::Parameter bias_;
  nn::SlotCaches<Cache> caches_;
};

// ---------------------------------------------------------------------------
// Task B: the Megatron MLP and attention with heads split (blocks.cc)
// ---------------------------------------------------------------------------

/// @brief Causal self-attention with NH/T heads on each rank (Note [Heads split]).
///
/// x (B, T, C) -> qkv column-parallel with groups = 3 -> (B, T, 3C/T) -> the
/// attention core on this rank's NH/T heads (nn::attention_core_forward()) ->
/// (B, T, C/T) -> proj row-parallel -> y (B, T, C). One allreduce forward
/// (proj's), one backward (qkv's). With sequence parallelism x and y are this
/// rank's rows (dimension 0, here the batch).
class ParallelSelfAttention : public nn::Layer {
 public:
  /// @brief This rank's heads of `full`.
  /// @param[in] full the unsplit attention; read, not changed.
  /// @param[in] tp the tensor-parallel group; must outlive the layer.
  /// @param[in] sequence_parallel see Note [Sequence parallelism].
  /// @throws dtl::InvalidArgument naming "full" and the tensor-parallel rank if T
  ///         does not divide the number of heads.
  ParallelSelfAttention(nn::CausalSelfAttention& full, Communicator& tp, bool sequence_parallel = false);
  /// @brief "ParallelSelfAttention".
  /// @return the kind.
  std::string kind() const override { return "ParallelSelfAttention"; }
  /// @brief y (B, T, C) from x (B, T, C).
  /// @param[in] x (B, T, C).
  /// @return y (B, T, C).
  const nn::Tensor& forward(const nn::Tensor& x) override;
  /// @brief Backward through proj, the core, then qkv.
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for proj's bias and weight, then qkv's bias and weight.
  /// @return dx (B, T, C).
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) override;
  /// @brief qkv.weight, qkv.bias (this rank's heads), proj.weight (its columns), proj.bias (whole).
  /// @return the parameters.
  std::vector<nn::Parameter*> parameters() override;
  /// @brief The same shape.
  /// @param[in] input (B, T, C).
  /// @return input.
  nn::Shape output_shape(const nn::Shape& input) const override;
  /// @brief Selects the slot here and in both projections.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees one slot here and in both projections.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief The input projection (column-parallel, groups = 3).
  /// @return it.
  ColumnParallelLinear& qkv() noexcept { return *qkv_; }
  /// @brief The output projection (row-parallel).
  /// @return it.
  RowParallelLinear& proj() noexcept { return *proj_; }

 private:
  struct Cache {
    nn::Tensor qkv, att, out, dqkv;  // as CausalSelfAttention's, for this rank's heads
  };
  std::int64_t channels_, heads_;  // the full layer's C and NH
  std::int64_t local_heads_;       // NH / T
  std::unique_ptr<ColumnParallelLinear> qkv_;
  std::unique_ptr<RowParallelLinear> proj_;
  nn::SlotCaches<Cache> caches_;
};

/// @brief The tensor-parallel copy of an MLP block of nn::make_mlp_block():
/// x + RowParallel(act(ColumnParallel(LayerNorm(x)))).
///
/// The LayerNorm is copied whole (replicated); fc becomes column-parallel, proj
/// row-parallel; the activation runs on the slices. One allreduce forward, one
/// backward. Names are the full block's.
/// @param[in] full a block made by nn::make_mlp_block() (a Residual around LayerNorm, Linear, ReLU or GELU, Linear).
/// @param[in] tp the tensor-parallel group; must outlive the block.
/// @param[in] sequence_parallel see Note [Sequence parallelism]: x and y are this rank's rows.
/// @return the block.
/// @throws dtl::InvalidArgument naming "full" if it is not such a block, or a size is not divisible by T.
std::unique_ptr<nn::Layer> make_parallel_mlp_block(nn::Layer& full, Communicator& tp, bool sequence_parallel = false);

/// @brief The tensor-parallel copy of an attention block of nn::make_attention_block():
/// x + ParallelSelfAttention(LayerNorm(x)).
/// @param[in] full a block made by nn::make_attention_block().
/// @param[in] tp the tensor-parallel group; must outlive the block.
/// @param[in] sequence_parallel see Note [Sequence parallelism].
/// @return the block.
/// @throws dtl::InvalidArgument naming "full" if it is not such a block, or T does not divide the heads.
std::unique_ptr<nn::Layer> make_parallel_attention_block(nn::Layer& full, Communicator& tp,
                                                         bool sequence_parallel = false);

// ---------------------------------------------------------------------------
// Task C: vocabulary-parallel embedding and cross-entropy (vocab_parallel.cc)
// ---------------------------------------------------------------------------

/// @brief A token embedding split by vocabulary (Note [Vocabulary parallel]).
///
/// Rank r holds rows [r V/T, (r+1) V/T) of the (V, C) table. Forward: tokens x
/// (B, T) i32 in [0, V) -> y (B, T, C): its own tokens' rows, zeros elsewhere,
/// then an allreduce (sum). Backward: dW_r[token - r V/T] += dy for its own
/// tokens; no communication. Collective over `tp` in forward.
class VocabParallelEmbedding : public nn::Layer {
 public:
  /// @brief This rank's rows of `full`.
  /// @param[in] full the unsplit embedding; read, not changed.
  /// @param[in] tp the tensor-parallel group; must outlive the layer.
  /// @throws dtl::InvalidArgument naming "full" and the tensor-parallel rank if T does not divide V.
  VocabParallelEmbedding(nn::Embedding& full, Communicator& tp);
  /// @brief "VocabParallelEmbedding".
  /// @return the kind.
  std::string kind() const override { return "VocabParallelEmbedding"; }
  /// @brief y (B, T, C), the same on every rank.
  /// @param[in] x (B, T) of i32, each in [0, V).
  /// @return y.
  /// @throws dtl::InvalidArgument naming "x" on a token outside [0, V) (on every rank: x is the same).
  const nn::Tensor& forward(const nn::Tensor& x) override;
  /// @brief dW_r += dy at this rank's tokens.
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for weight.
  /// @return an undefined tensor (token ids have no gradient).
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) override;
  /// @brief weight (V/T, C).
  /// @return the parameters.
  std::vector<nn::Parameter*> parameters() override { return {&weight_}; }
  /// @brief (B, T) -> (B, T, C).
  /// @param[in] input the input shape.
  /// @return the output shape.
  nn::Shape output_shape(const nn::Shape& input) const override;
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }
  /// @brief The first token this rank owns.
  /// @return r V/T.
  std::int64_t vocab_begin() const noexcept { return vocab_begin_; }

 private:
  struct Cache {
    nn::Tensor x, y;
  };
  Communicator& tp_;
  std::int64_t vocab_, channels_, vocab_begin_, vocab_local_;
  nn::Parameter weight_;
  nn::SlotCaches<Cache> caches_;
};

/// @brief Softmax cross-entropy over logits split by vocabulary (Note [Vocabulary parallel]).
///
/// logits_r (N..., V/T) are this rank's columns of the full (N..., V) logits
/// (columns [r V/T, (r+1) V/T)); targets (N...) the same on every rank. The loss
/// equals nn::SoftmaxCrossEntropy's on the full logits; the full logits are never
/// formed. Forward: one all-gather of N row maxima (f64) and one allreduce of 2N
/// values (f64). Backward: none. Collective over `tp` in forward.
class VocabParallelCrossEntropy {
 public:
  /// @brief A loss for a vocabulary of `vocab` tokens split over `tp`.
  /// @param[in] tp the tensor-parallel group; must outlive this.
  /// @param[in] vocab V, the full vocabulary.
  /// @throws dtl::InvalidArgument naming "vocab" and the tensor-parallel rank if T does not divide it.
  VocabParallelCrossEntropy(Communicator& tp, std::int64_t vocab);
  /// @brief The mean loss over the N rows; caches this rank's probabilities.
  /// @param[in] logits this rank's (N..., V/T), f32 or f64.
  /// @param[in] targets (N...) i32 in [0, V), the same on every rank.
  /// @return the mean loss, the same on every rank.
  /// @throws dtl::InvalidArgument naming "logits" or "targets" on a wrong shape, dtype or a target out of range.
  double forward(const nn::Tensor& logits, const nn::Tensor& targets);
  /// @brief dL/dlogits_r = scale (softmax_r - onehot_r(targets)) / N.
  /// @param[in] scale multiplies the gradient (default 1).
  /// @return this rank's dlogits (N..., V/T), owned by this object.
  /// @throws dtl::InvalidArgument if forward was not called.
  const nn::Tensor& backward(double scale = 1.0);

 private:
  Communicator& tp_;
  std::int64_t vocab_, vocab_begin_, vocab_local_;
  nn::Tensor probs_, targets_, dlogits_;
};

// ---------------------------------------------------------------------------
// Given: a GPT, tensor-parallel (tp_util.cc)
// ---------------------------------------------------------------------------

/// @brief The tensor-parallel copy of a GPT made by nn::make_gpt() (given).
///
/// Units as the full model's: "embed" = VocabParallelEmbedding + a copy of the
/// positional embedding; "block i" = make_parallel_attention_block() and
/// make_parallel_mlp_block() of the full blocks; "head" = a copy of the final
/// LayerNorm and the output layer as a ColumnParallelLinear, whose output is this
/// rank's (B, T, V/T) logits for VocabParallelCrossEntropy. No sequence parallelism.
/// @param[in] full the whole GPT (f32 or f64), the same on every rank; read, not changed.
/// @param[in] tp the tensor-parallel group; must outlive the model.
/// @return this rank's model.
/// @throws dtl::InvalidArgument if T does not divide V, C or the heads (from the layers).
nn::Model make_tensor_parallel_gpt(nn::Model& full, Communicator& tp);

// ---------------------------------------------------------------------------
// Task D: gradients across the tensor group (sequence_parallel.cc); TP x DP on lab 07's grid
// ---------------------------------------------------------------------------

// TP x DP runs on lab 07's grid (Note [TP x DP]): one Grid, one make_grid() and one
// allreduce_data_parallel_gradients() for both labs, your lab-07 code.
using lab07::allreduce_data_parallel_gradients;
using lab07::Grid;
using lab07::make_grid;

/// @brief Sums the partial gradients of parameters used in a sequence-parallel
/// region over the tensor-parallel group (Note [Sequence parallelism]).
///
/// Collective over `tp`: every rank passes its copies of the same parameters, in the same order.
/// @param[in] tp the tensor-parallel group.
/// @param[in] replicated the parameters replicated on every rank and used on split rows
///            (LayerNorm weights and biases, row-parallel biases); f32 or f64.
void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated);

}  // namespace dtl::lab08
