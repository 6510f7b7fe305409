/// @file
/// @brief Where a language model starts: the token embedding (ids to vectors)
/// and the learned positional embedding. Conventions: see layer_interface.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/nn/layer_interface.h"
#include "harness/random.h"

namespace dtl::nn {

/// @brief Token embedding: y[b, t] = W[x[b, t]]. x is (B, T) of i32 token ids, W is (V, C), y is (B, T, C).
class Embedding : public Layer {
 public:
  /// @brief An embedding table with weights ~ N(0, init_std).
  /// @param[in] name the layer's name; the parameter is name.weight.
  /// @param[in] vocab V, the number of token ids.
  /// @param[in] channels C.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in,out] rng draws the weights.
  /// @param[in] init_std the standard deviation (GPT-2: 0.02).
  /// @throws dtl::InvalidArgument if vocab or channels < 1, or dtype is not a float type.
  Embedding(std::string name, std::int64_t vocab, std::int64_t channels, DType dtype, Rng& rng,
            double init_std = 0.02);
  /// @brief "Embedding".
  /// @return the kind.
  std::string kind() const override { return "Embedding"; }
  /// @brief Looks up each token's row.
  /// @param[in] x (B, T) of i32, each in [0, V).
  /// @return y (B, T, C).
  /// @throws dtl::InvalidArgument on a token id out of range.
  const Tensor& forward(const Tensor& x) override;
  /// @brief dW[x[b, t]] += dy[b, t].
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for weight.
  /// @return an undefined tensor (token ids have no gradient).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief weight.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override { return {&weight_}; }
  /// @brief (B, T) -> (B, T, C).
  /// @param[in] input the input shape.
  /// @return the output shape.
  Shape output_shape(const Shape& input) const override;
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }

 private:
  struct Cache {
    Tensor x, y;
  };
  std::int64_t vocab_, channels_;
  Parameter weight_;
  SlotCaches<Cache> caches_;
};

/// @brief Learned positions: y[b, t] = x[b, t] + P[t]. x and y are (B, T, C), P is (context, C), T <= context.
class PositionalEmbedding : public Layer {
 public:
  /// @brief A position table with weights ~ N(0, init_std).
  /// @param[in] name the layer's name; the parameter is name.weight.
  /// @param[in] context the longest sequence, >= 1.
  /// @param[in] channels C.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in,out] rng draws the weights.
  /// @param[in] init_std the standard deviation (GPT-2: 0.01 to 0.02).
  /// @throws dtl::InvalidArgument if context or channels < 1, or dtype is not a float type.
  PositionalEmbedding(std::string name, std::int64_t context, std::int64_t channels, DType dtype,
                      Rng& rng, double init_std = 0.02);
  /// @brief "PositionalEmbedding".
  /// @return the kind.
  std::string kind() const override { return "PositionalEmbedding"; }
  /// @brief Adds each position's row.
  /// @param[in] x (B, T, C) with T <= context.
  /// @return y (B, T, C).
  const Tensor& forward(const Tensor& x) override;
  /// @brief dP[t] += sum_b dy[b, t]; dx = dy.
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for weight.
  /// @return dx (B, T, C).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief weight.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override { return {&weight_}; }
  /// @brief The same shape.
  /// @param[in] input (B, T, C).
  /// @return input.
  Shape output_shape(const Shape& input) const override;
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }

 private:
  struct Cache {
    Tensor y, dx;
  };
  std::int64_t context_, channels_;
  Parameter weight_;
  SlotCaches<Cache> caches_;
};

}  // namespace dtl::nn
