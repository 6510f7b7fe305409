/// @file
/// @brief The dense layers of an MLP: Linear (y = x W^T + b, through GEMM) and
/// the elementwise activations ReLU and GELU. Conventions: see layer_interface.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/nn/layer_interface.h"
#include "harness/random.h"

namespace dtl::nn {

// ---------------------------------------------------------------------------
// Linear
// ---------------------------------------------------------------------------

/// @brief y = x W^T + b. x is (N..., in), W is (out, in), b is (out), y is (N..., out).
///
/// Costs 2*N*in*out flops forward and twice that backward (dW and dx).
/// On the GPU, a Linear whose bias a GELU took over (GELU::fuse_bias_of, done by
/// make_mlp_block) outputs x W^T only and leaves the bias and its gradient to that
/// GELU; on the CPU it always adds its bias itself.
class Linear : public Layer {
 public:
  /// @brief A Linear layer with freshly initialized weights and zero bias.
  /// @param[in] name the layer's name; parameters are name.weight and name.bias.
  /// @param[in] in input features.
  /// @param[in] out output features.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in,out] rng draws the weights, row by row.
  /// @param[in] init_std > 0: weights ~ N(0, init_std); otherwise uniform in
  ///            +-1/sqrt(in) (PyTorch's default).
  /// @param[in] bias whether there is a bias.
  /// @throws dtl::InvalidArgument if in or out < 1 or dtype is not a float type.
  Linear(std::string name, std::int64_t in, std::int64_t out, DType dtype, Rng& rng,
         double init_std = 0.0, bool bias = true);
  /// @brief "Linear".
  /// @return the kind.
  std::string kind() const override { return "Linear"; }
  /// @brief y (N..., out) = x (N..., in) W^T + b.
  /// @param[in] x (N..., in).
  /// @return y (N..., out).
  const Tensor& forward(const Tensor& x) override;
  /// @brief db += sum_n dy; dW += dy^T x; dx = dy W.
  /// @param[in] dy (N..., out).
  /// @param[in] grad_ready fired for bias, then weight.
  /// @return dx (N..., in).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief B: dx = dy W; keeps dy in the slot for W (Note [Split backward]).
  /// @param[in] dy (N..., out).
  /// @return dx (N..., in).
  /// @throws dtl::InvalidArgument as backward(), or if this slot's last B still waits for its W.
  const Tensor& backward_input(const Tensor& dy) override;
  /// @brief W: db += sum_n dy; dW += dy^T x, with the slot's x and B's dy.
  /// @param[in] grad_ready fired for bias, then weight.
  /// @throws dtl::InvalidArgument if this slot has no B waiting for its W.
  void backward_weight(const GradReadyFn& grad_ready) override;
  /// @brief weight, then bias (if any).
  /// @return the parameters.
  std::vector<Parameter*> parameters() override;
  /// @brief (N..., in) -> (N..., out).
  /// @param[in] input the input shape.
  /// @return the output shape.
  Shape output_shape(const Shape& input) const override;
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }
  /// @brief The weight, (out, in).
  /// @return the parameter.
  Parameter& weight() noexcept { return weight_; }
  /// @brief The bias, (out); undefined tensors when built without bias.
  /// @return the parameter.
  Parameter& bias() noexcept { return bias_; }

 private:
  friend class GELU;  // GELU::fuse_bias_of sets bias_to_gelu_
  struct Cache {
    Tensor x, y, dx;
    Tensor dy;  // B's dy, kept for W; undefined when no W is due
  };
  void add_weight_grads(const Tensor& x, const Tensor& dy, const GradReadyFn& grad_ready);
  const Tensor& input_grad(Cache& cache, const Tensor& dy);
  std::int64_t in_, out_;
  bool has_bias_;
  // On the GPU the bias (value and gradient) is the next GELU's business: See
  // Note [Fused bias + GELU] in kernels/bias_gelu.cu. The CPU ignores it.
  bool bias_to_gelu_ = false;
  Parameter weight_, bias_;
  SlotCaches<Cache> caches_;
};

// ---------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------

/// @brief y = max(x, 0), elementwise; any shape.
class ReLU : public Layer {
 public:
  /// @brief A ReLU called `name`.
  /// @param[in] name the layer's name.
  explicit ReLU(std::string name) : Layer(std::move(name)) {}
  /// @brief "ReLU".
  /// @return the kind.
  std::string kind() const override { return "ReLU"; }
  /// @brief y = max(x, 0).
  /// @param[in] x any shape.
  /// @return y, same shape.
  const Tensor& forward(const Tensor& x) override;
  /// @brief dx = dy where x > 0, else 0.
  /// @param[in] dy same shape as x.
  /// @param[in] grad_ready unused (no parameters).
  /// @return dx.
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief The same shape.
  /// @param[in] input the input shape.
  /// @return input.
  Shape output_shape(const Shape& input) const override { return input; }
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }

 private:
  struct Cache {
    Tensor x, y, dx;
  };
  SlotCaches<Cache> caches_;
};

/// @brief GELU, tanh approximation (GPT-2): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
class GELU : public Layer {
 public:
  /// @brief A GELU called `name`.
  /// @param[in] name the layer's name.
  explicit GELU(std::string name) : Layer(std::move(name)) {}
  /// @brief "GELU".
  /// @return the kind.
  std::string kind() const override { return "GELU"; }
  /// @brief y = gelu(x), elementwise.
  /// @param[in] x any shape.
  /// @return y, same shape.
  const Tensor& forward(const Tensor& x) override;
  /// @brief dx = gelu'(x) dy.
  /// @param[in] dy same shape as x.
  /// @param[in] grad_ready unused (no parameters).
  /// @return dx.
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief The same shape.
  /// @param[in] input the input shape.
  /// @return input.
  Shape output_shape(const Shape& input) const override { return input; }
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  void release_slot(int slot) override { caches_.release(slot); }
  /// @brief Takes over the bias of `linear`, the layer right before this one, on the GPU:
  /// there `linear` computes x W^T only, this layer computes gelu(. + b) in the same pass
  /// and, backward, adds the bias gradient (Note [Fused bias + GELU] in
  /// kernels/bias_gelu.cu). The result is the same function as the two layers unfused;
  /// the parameters stay `linear`'s (its bias is still announced by its backward). On
  /// the CPU nothing changes. make_mlp_block links its Linear and GELU this way.
  /// @param[in,out] linear must have a bias and outlive this layer; its forward must be
  ///            this layer's input.
  /// @throws dtl::InvalidArgument if `linear` has no bias.
  void fuse_bias_of(Linear& linear);

 private:
  struct Cache {
    Tensor x, y, dx;
  };
  SlotCaches<Cache> caches_;
  Parameter* bias_ = nullptr;  // the fused Linear's bias, or null
};

}  // namespace dtl::nn
