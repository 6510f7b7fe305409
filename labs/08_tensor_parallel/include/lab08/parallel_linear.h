/// @file
/// @brief Lab 08, task A (and the sequence-parallel half of task D): the column- and
/// row-parallel Linear layers, and the given size splitting they rest on.
///
/// What this header holds: Note [Tensor parallelism] (the two ways to cut a weight),
/// Note [f and g] (where the one collective of each layer goes), Note [Splitting a
/// fused projection] (qkv), Note [Sequence parallelism] (the layers' row-split
/// variant); the given shard_range(), copy_layer_norm() and round_up()
/// (given/tp_util.cc); ParallelOptions, ColumnParallelLinear and RowParallelLinear
/// (your src/parallel_linear.cc). The lab's overview is in lab08/tensor_parallel.h.
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

// Note [Sequence parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Between the pairs (LayerNorm, dropout, the residual adds) plain tensor
// parallelism computes the same thing on every rank, on the whole activation:
// T copies of the work and of the memory. Sequence parallelism (Korthikanti et
// al., 2022) splits those regions along the sequence instead: of every sequence
// of S tokens, rank r keeps tokens [r S/T, (r+1) S/T), so an activation
// (B, S, C) is (B, S/T, C) on each rank. The sequence is the second-to-last
// dimension: (B, S, C), or (S, C) for one sequence. sequence_shard() (given) is
// the one place that says which tokens a rank holds. Entering a column-parallel
// layer, an all-gather collects every rank's tokens; leaving a row-parallel
// layer, a reduce-scatter both sums the partial results and hands each rank
// its tokens:
//
//                      forward           backward
//     enter (column)   all-gather x      reduce-scatter dx     (replaces f)
//     leave (row)      reduce-scatter y  all-gather dy         (replaces g)
//
// The layers in between (the GELU, attention) see whole sequences, in (B, S, C)
// order: attention needs every earlier token of a sequence. The collectives
// work on rank-ordered blocks (block r of an all-gather is rank r's buffer;
// block r of a reduce-scatter's input is what rank r receives, summed), and for
// B > 1 rank r's tokens are not one contiguous block of (B, S, C): B pieces of
// S/T tokens, one per sequence. So the blocks are reordered on the way in and
// on the way out. The buffer a collective reads or writes in rank order exists
// only for the collective: charge it to MemoryCategory::kCommunication
// (ensure_staging(), given), never to activations.
//
// An allreduce *is* a reduce-scatter followed by an all-gather (lab 03), so the
// bytes on the wire are the same as without sequence parallelism; what is saved
// is the activation memory and the work of the split regions, by T exactly (the
// tests measure it: Note [Activation memory with sequence parallelism] in
// lab08/tensor_parallel.h).
//
// The catch: a parameter used in the split region (LayerNorm's weight and bias,
// a row-parallel layer's bias) now sees only this rank's tokens in backward. Its
// gradient on each rank is a partial sum; allreduce_sequence_parallel_gradients()
// adds the partial sums over the tensor-parallel group before the optimizer step.

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

/// @brief Which tokens of every sequence a rank holds with sequence parallelism (given).
///
/// A tensor of shape (..., S, C) holds `sequences` = the product of the dimensions
/// before S (1 for a 2-D tensor), each of S tokens of `token` = C elements; rank
/// `index` of `parts` holds tokens [tokens.begin, tokens.begin + tokens.size) of every
/// sequence (Note [Sequence parallelism]).
struct SequenceShard {
  std::int64_t sequences = 0;  ///< B: the sequences of the full tensor
  std::int64_t length = 0;     ///< S: the tokens of each whole sequence
  std::int64_t token = 0;      ///< C: the elements of one token
  ShardRange tokens;           ///< this rank's tokens of each sequence: [r S/T, (r+1) S/T)
};

/// @brief Rank `index`'s tokens of a tensor of shape `full` split along its sequence (given).
///
/// The one place a rank is mapped to its tokens (Note [Sequence parallelism]).
/// @param[in] full the shape of the whole tensor, (..., S, C), at least 2 dimensions.
/// @param[in] parts T >= 1.
/// @param[in] index r in [0, T).
/// @param[in] function named in the error, e.g. "RowParallelLinear.forward".
/// @param[in] argument named in the error, e.g. "x".
/// @return the sequences, their length, the token size and this rank's tokens.
/// @throws dtl::InvalidArgument naming function, argument, the shape, T and the
///         tensor-parallel rank, if the shape has fewer than 2 dimensions or T does not divide S.
SequenceShard sequence_shard(const nn::Shape& full, int parts, int index, const char* function,
                             const char* argument);

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
  /// split along the sequence (the second-to-last dimension) across the group instead
  /// of replicated.
  bool sequence_parallel = false;
};

/// @brief A Linear layer whose weight is split by output features (Note [Tensor parallelism]).
///
/// x (N..., in) is the whole input on every rank. y (N..., out/T) is this rank's
/// slice of the output features: with groups = g, piece r of each of the g
/// blocks of out/g features. Forward: no communication. Backward: dW_r, b_r as a
/// Linear's; dx = allreduce over the group of dy_r W_r.
///
/// With sequence parallelism (Note [Sequence parallelism]) x is this rank's tokens
/// of every sequence, (B, S/T, in) (sequence_shard()); y is this rank's output
/// features for every token of the whole sequences, (B, S, out/T), in sequence
/// order; forward all-gathers x into cache.gathered (B, S, in), the activation it
/// keeps for backward; backward returns dx for this rank's tokens only, (B, S/T, in),
/// summed over the group (a reduce-scatter). Buffers in rank order are
/// kCommunication (ensure_staging()).
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
  /// @brief y_r (N..., out/T) from x (N..., in) (with sequence parallelism, x is (B, S/T, in), y (B, S, out/T)).
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
  /// @brief (N..., in) -> (N..., out/T); with sequence parallelism (..., S/T, in) -> (..., S, out/T).
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
    nn::Tensor gathered;  // sequence parallelism: x with every rank's tokens, (B, S, in)
    nn::Tensor dx;        // sequence parallelism: this rank's tokens of dx, (B, S/T, in)
    nn::Tensor staging;   // sequence parallelism: a collective's buffer in rank order (kCommunication)
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
/// plus the whole bias, which every rank holds. Backward: dx_r = dy W_r,
/// dW_r = dy^T x_r, db = sum of dy: no communication.
///
/// With sequence parallelism (Note [Sequence parallelism]) x_r is (B, S, in/T) as
/// before, and y is this rank's tokens of every sequence, (B, S/T, out), summed over
/// the group (a reduce-scatter) plus the bias, in cache.y; dy is (B, S/T, out) and is
/// all-gathered into cache.gathered (B, S, out) in sequence order; db covers this
/// rank's tokens only. Buffers in rank order are kCommunication (ensure_staging()).
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
  /// @brief (N..., in/T) -> (N..., out); with sequence parallelism (..., S, in/T) -> (..., S/T, out).
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
    nn::Tensor y;         // the reduced output (plus bias); with sequence parallelism (B, S/T, out)
    nn::Tensor gathered;  // sequence parallelism: dy with every rank's tokens, (B, S, out)
    nn::Tensor staging;   // sequence parallelism: a collective's buffer in rank order (kCommunication)
  };
  Communicator& tp_;
  ParallelOptions options_;
  std::int64_t in_, out_;  // the full layer's features
  bool has_bias_;
  nn::Linear local_;       // Linear(in/T, out) without bias: this rank's columns
  nn::Parameter bias_;
  nn::SlotCaches<Cache> caches_;
};

}  // namespace dtl::lab08
