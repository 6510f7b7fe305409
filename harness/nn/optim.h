/// @file
/// @brief Optimizers that update a span of a flat buffer: SGD with momentum, and AdamW.
///
/// What this file teaches: an optimizer step is elementwise — element i of the
/// parameters moves using only element i of the gradient and of the state. So
/// the step over a whole flat buffer equals, bit for bit, the steps over any
/// slices of it. That is what lets labs 04–06 shard optimizer state: rank r
/// owns the slice [r*S, (r+1)*S) of the flat parameters and keeps state for
/// that slice only (ZeRO-1/FSDP), using 1/W of the memory.
///
/// Each optimizer owns the state for exactly `count` elements (charged to
/// MemoryCategory::kOptimizerState) and its step() takes the matching slice
/// of parameters and gradients.
#pragma once

#include <cstdint>
#include <span>

#include "harness/nn/tensor.h"

namespace dtl::nn {

namespace kernels {
struct AdamWStep;  // kernels/optim_math.cuh: the constants of one step
}  // namespace kernels

/// @brief SGD hyper-parameters (PyTorch's semantics; no dampening, no Nesterov).
struct SgdOptions {
  float lr = 0.01f;            ///< learning rate
  float momentum = 0.0f;       ///< momentum factor; 0 keeps no state
  float weight_decay = 0.0f;   ///< L2 penalty added to the gradient
};

/// @brief SGD with momentum over `count` elements:
/// g = grad + wd * p;  m = momentum * m + g;  p -= lr * m   (m = g when momentum is 0).
class Sgd {
 public:
  /// @brief An optimizer for a slice of `count` elements; momentum state starts at zero.
  /// @param[in] options the hyper-parameters.
  /// @param[in] count elements it will update (the slice length).
  /// @param[in] device where the state lives: host memory (kCpu, or kPinnedHost for
  ///            lab 06's CPU offload), stepped by step(span, span) or step(Tensor, Tensor)
  ///            on host tensors; or kCuda, stepped on the GPU by step(Tensor, Tensor).
  /// @throws dtl::InvalidArgument if count < 0, lr, momentum or weight_decay is negative.
  Sgd(SgdOptions options, std::int64_t count, Device device = Device::kCpu);
  /// @brief One step over the slice.
  /// @param[in,out] params the parameter slice, `count` floats.
  /// @param[in] grads the gradient slice, `count` floats.
  /// @throws dtl::InvalidArgument if either size differs from `count`, or the state is on the GPU.
  void step(std::span<float> params, std::span<const float> grads);
  /// @brief One step over a slice given as tensors (e.g. `flat.view(r * S, {S})`), run where
  /// they live: on the GPU, one kernel queued on the compute stream (compute_stream.h).
  /// @param[in,out] params the parameter slice, `count` f32 elements.
  /// @param[in] grads the gradient slice, `count` f32 elements, on the same device.
  /// @throws dtl::InvalidArgument on a wrong size or dtype, or if params, grads and the
  ///         state are not all on one device.
  void step(const Tensor& params, const Tensor& grads);
  /// @brief The hyper-parameters (lr may be changed between steps, e.g. a schedule).
  /// @return the options.
  SgdOptions& options() noexcept { return options_; }
  /// @brief The momentum buffer (undefined when momentum is 0).
  /// @return the state, `count` floats.
  const Tensor& momentum() const noexcept { return momentum_; }

 private:
  SgdOptions options_;
  std::int64_t count_;
  Tensor momentum_;
};

/// @brief AdamW hyper-parameters (Loshchilov & Hutter; PyTorch's defaults except weight decay).
struct AdamWOptions {
  float lr = 1e-3f;            ///< learning rate
  float beta1 = 0.9f;          ///< first-moment decay
  float beta2 = 0.999f;        ///< second-moment decay
  float eps = 1e-8f;           ///< added to sqrt(v_hat)
  float weight_decay = 0.0f;   ///< decoupled: p -= lr * wd * p
};

/// @brief AdamW over `count` elements. At step t (from 1):
/// p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
/// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamW {
 public:
  /// @brief An optimizer for a slice of `count` elements; m and v start at zero.
  /// @param[in] options the hyper-parameters.
  /// @param[in] count elements it will update.
  /// @param[in] device where m and v live: host memory (kCpu, or kPinnedHost for
  ///            lab 06's CPU offload), stepped by step(span, span) or step(Tensor, Tensor)
  ///            on host tensors; or kCuda, stepped on the GPU by step(Tensor, Tensor).
  /// @throws dtl::InvalidArgument if count < 0 or a hyper-parameter is out of range.
  AdamW(AdamWOptions options, std::int64_t count, Device device = Device::kCpu);
  /// @brief One step over the slice (t advances by one).
  /// @param[in,out] params the parameter slice, `count` floats.
  /// @param[in] grads the gradient slice, `count` floats.
  /// @throws dtl::InvalidArgument if either size differs from `count`, or the state is on the GPU.
  void step(std::span<float> params, std::span<const float> grads);
  /// @brief One step over a slice given as tensors, run where they live (see Sgd::step(Tensor, Tensor)).
  /// @param[in,out] params the parameter slice, `count` f32 elements.
  /// @param[in] grads the gradient slice, `count` f32 elements, on the same device.
  /// @throws dtl::InvalidArgument on a wrong size or dtype, or if params, grads, m and v
  ///         are not all on one device.
  void step(const Tensor& params, const Tensor& grads);
  /// @brief The hyper-parameters (lr may be changed between steps).
  /// @return the options.
  AdamWOptions& options() noexcept { return options_; }
  /// @brief Steps taken so far.
  /// @return t.
  std::int64_t steps() const noexcept { return t_; }
  /// @brief Sets the step count t, e.g. when resuming from a checkpoint (with m and v
  /// written back through m() and v()): the next step() is step t + 1.
  /// @param[in] steps t, >= 0.
  /// @throws dtl::InvalidArgument if steps is negative.
  void set_steps(std::int64_t steps);
  /// @brief The first moment m.
  /// @return `count` floats.
  const Tensor& m() const noexcept { return m_; }
  /// @brief The second moment v.
  /// @return `count` floats.
  const Tensor& v() const noexcept { return v_; }

 private:
  kernels::AdamWStep next_step();  // t += 1; this step's constants

  AdamWOptions options_;
  std::int64_t count_;
  std::int64_t t_ = 0;
  Tensor m_, v_;
};

}  // namespace dtl::nn
