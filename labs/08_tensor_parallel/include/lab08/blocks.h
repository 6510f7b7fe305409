/// @file
/// @brief Lab 08, task B: the Megatron MLP block and attention with its heads split.
///
/// What this header holds: Note [Heads split]; ParallelSelfAttention and the
/// tensor-parallel copies of the MLP and attention blocks (your src/blocks.cc),
/// each a column-parallel layer then a row-parallel one (lab08/parallel_linear.h):
/// one allreduce forward, one backward. The lab's overview is in lab08/tensor_parallel.h.
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

// ---------------------------------------------------------------------------
// Task B: the Megatron MLP and attention with heads split (blocks.cc)
// ---------------------------------------------------------------------------

/// @brief Causal self-attention with NH/T heads on each rank (Note [Heads split]).
///
/// x (B, T, C) -> qkv column-parallel with groups = 3 -> (B, T, 3C/T) -> the
/// attention core on this rank's NH/T heads (nn::attention_core_forward()) ->
/// (B, T, C/T) -> proj row-parallel -> y (B, T, C). One allreduce forward
/// (proj's), one backward (qkv's). With sequence parallelism x and y are this
/// rank's tokens of every sequence, (B, S/T, C); the core still sees whole
/// sequences, which qkv's all-gather puts back in order (Note [Sequence parallelism]).
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
/// @param[in] sequence_parallel see Note [Sequence parallelism]: x and y are this rank's tokens of every sequence.
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

}  // namespace dtl::lab08
