/// @file
/// @brief LayerNorm: each row of the last dimension normalized to mean 0 and
/// variance 1, then scaled and shifted. Conventions: see layer_interface.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/nn/layer_interface.h"

namespace dtl::nn {

/// @brief Normalizes each row of the last dimension: y = (x - mean) * rstd * w + b.
///
/// x is (N..., C); mean and rstd = 1/sqrt(var + 1e-5) are per row (N), cached for backward.
class LayerNorm : public Layer {
 public:
  /// @brief A LayerNorm over `channels`, weight 1 and bias 0.
  /// @param[in] name the layer's name; parameters name.weight and name.bias.
  /// @param[in] channels C.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @throws dtl::InvalidArgument if channels < 1 or dtype is not a float type.
  LayerNorm(std::string name, std::int64_t channels, DType dtype);
  /// @brief "LayerNorm".
  /// @return the kind.
  std::string kind() const override { return "LayerNorm"; }
  /// @brief y (N..., C) from x (N..., C).
  /// @param[in] x (N..., C).
  /// @return y (N..., C).
  const Tensor& forward(const Tensor& x) override;
  /// @brief dw, db accumulated; dx = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dy w.
  /// @param[in] dy (N..., C).
  /// @param[in] grad_ready fired for bias, then weight.
  /// @return dx (N..., C).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief weight, then bias.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }
  /// @brief The same shape.
  /// @param[in] input (N..., C).
  /// @return input.
  Shape output_shape(const Shape& input) const override;
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }

 private:
  struct Cache {
    Tensor x, y, mean, rstd, dx;
  };
  std::int64_t channels_;
  Parameter weight_, bias_;
  SlotCaches<Cache> caches_;
};

}  // namespace dtl::nn
