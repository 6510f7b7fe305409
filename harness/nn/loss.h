/// @file
/// @brief SoftmaxCrossEntropy: the loss every model here trains on, and where
/// backward starts. Shapes: see layer_interface.h.
#pragma once

#include <cstdint>

#include "harness/nn/tensor.h"

namespace dtl::nn {

/// @brief Softmax followed by the mean negative log-likelihood of the targets.
///
/// logits are (N..., V), targets (N...) of i32 class ids. loss = -1/N sum_n
/// log softmax(logits[n])[targets[n]], computed stably (max subtracted) and
/// accumulated in double. Not a Layer: it takes two inputs and starts backward.
class SoftmaxCrossEntropy {
 public:
  /// @brief The mean loss; caches the probabilities for backward.
  /// @param[in] logits (N..., V), f32 or f64.
  /// @param[in] targets (N...), i32, each in [0, V).
  /// @return the mean loss over the N rows.
  /// @throws dtl::InvalidArgument on mismatched shapes, a wrong dtype or a target out of range.
  double forward(const Tensor& logits, const Tensor& targets);
  /// @brief dL/dlogits = scale * (softmax(logits) - onehot(targets)) / N.
  /// @param[in] scale multiplies the gradient (lab 05's loss scale; default 1).
  /// @return dlogits (N..., V), owned by this object.
  /// @throws dtl::InvalidArgument if forward was not called.
  const Tensor& backward(double scale = 1.0);
  /// @brief How many rows of the last forward had argmax(logits) == target.
  /// @return the count of correct predictions.
  std::int64_t correct() const noexcept { return correct_; }
  /// @brief The probabilities of the last forward.
  /// @return softmax(logits), (N..., V).
  const Tensor& probs() const noexcept { return probs_; }

 private:
  Tensor probs_, targets_, dlogits_;
  std::int64_t correct_ = 0;
};

}  // namespace dtl::nn
