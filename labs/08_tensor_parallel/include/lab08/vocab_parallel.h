/// @file
/// @brief Lab 08, task C: the vocabulary-parallel embedding and cross-entropy.
///
/// What this header holds: Note [Vocabulary parallel] (the two ends of a language
/// model split by vocabulary, and a loss that never forms the full logits);
/// VocabParallelEmbedding and VocabParallelCrossEntropy (your src/vocab_parallel.cc).
/// The lab's overview is in lab08/tensor_parallel.h; sizes are split by
/// shard_range() (lab08/parallel_linear.h).
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/tensor.h"

namespace dtl::lab08 {

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

}  // namespace dtl::lab08
