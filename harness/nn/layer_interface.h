/// @file
/// @brief The layer interface: Parameter, the grad_ready callback, per-slot
/// caches, the abstract Layer, and the two containers that compose layers,
/// Sequential and Residual. The layers themselves are in dense.h,
/// normalization.h, embedding.h and transformer.h; the loss in loss.h
/// (layers.h includes them all).
///
/// What this file teaches: backpropagation without autograd. Each layer has a
/// forward(x) that computes its output and keeps what its backward will need
/// (a cache), and a backward(dy) that, given dL/dy, *adds* dL/dparameter into
/// each parameter's grad and returns dL/dx. Written out per layer, as in llm.c.
///
/// Conventions, every layer:
///   - shapes: B batch, T sequence (time), C channels, V vocabulary, NH heads,
///     hs = C / NH head size, N = all leading dimensions flattened. A layer that
///     works on the last dimension accepts any leading dimensions.
///   - dtype: the layer computes in its parameters' dtype, f32 (training) or f64
///     (gradient checks); x must have that dtype (token ids are i32).
///   - device: an op runs where its tensors are. After Model::to(Device::kCuda) (or
///     with a layer's parameters moved there) every layer computes on the GPU, in
///     f32, on the calling thread's compute stream (compute_stream.h); inputs on
///     another device than the parameters are refused, naming both. See Note [One
///     dispatch point] in layer_util.h.
///   - forward returns a reference to a tensor the layer owns (charged to
///     MemoryCategory::kActivations), valid until the next forward in the same
///     activation slot. The layer keeps a *handle* to x, not a copy: do not
///     overwrite x's elements before backward.
///   - backward accumulates: grad += dL/dparameter. Call zero_grad() (Model or
///     Parameter) between steps; skip it to accumulate micro-batches (lab 04).
///   - as soon as a parameter's gradient is final, backward calls
///     grad_ready(parameter) — in reverse parameter order (lab 04's buckets).
///   - activation slots: a layer keeps one cache per slot (set_slot()), so that
///     a pipeline stage can hold several micro-batches in flight (lab 07).
///   - the backward also comes in two halves, backward_input() (B: dL/dx) and
///     backward_weight() (W: dL/dparameter), for zero-bubble pipelines (lab 07):
///     See Note [Split backward].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/nn/tensor.h"

namespace dtl::nn {

/// @brief A trainable tensor and its gradient, same shape and dtype.
///
/// `value` and `grad` are handles: flatten_values()/flatten_grads() in model.h
/// rebind them to views into one flat buffer.
struct Parameter {
  std::string name;  ///< unique within a model, e.g. "block0.attn.qkv.weight"
  Tensor value;      ///< the weights (MemoryCategory::kParameters)
  Tensor grad;       ///< dL/dvalue, accumulated by backward (MemoryCategory::kGradients)

  /// @brief Sets grad to zero (the start of a step).
  void zero_grad() const { grad.zero(); }
};

/// @brief Called by backward once a parameter's gradient is final.
using GradReadyFn = std::function<void(Parameter&)>;

/// @brief Keeps one cache of type `Cache` per activation slot.
/// @tparam Cache a struct of Tensors a layer keeps from forward to backward.
template <typename Cache>
class SlotCaches {
 public:
  /// @brief The cache of `slot`, created empty on first use.
  /// @param[in] slot the activation slot, >= 0.
  /// @return the cache.
  Cache& at(int slot) {
    if (static_cast<std::size_t>(slot) >= caches_.size()) caches_.resize(static_cast<std::size_t>(slot) + 1);
    return caches_[static_cast<std::size_t>(slot)];
  }
  /// @brief Drops the cache of `slot` (its tensors are freed unless shared).
  /// @param[in] slot the activation slot.
  void release(int slot) {
    if (static_cast<std::size_t>(slot) < caches_.size()) caches_[static_cast<std::size_t>(slot)] = Cache{};
  }

 private:
  std::vector<Cache> caches_;
};

// Note [Split backward]
// ~~~~~~~~~~~~~~~~~~~~~~
// A layer's backward does two independent things with dy: dL/dx (the previous
// layer, or the previous pipeline stage, waits for it) and dL/dparameter
// (nobody waits for it until the optimizer step). Zero-bubble pipelines (Qi et
// al., 2023; lab 07, Note [Zero bubble]) run them apart:
//
//     backward(dy, grad_ready)          the fused backward: both at once
//     backward_input(dy)                B: returns dL/dx, keeps dy in the current slot
//     backward_weight(grad_ready)       W: adds dL/dparameter into grad (current slot)
//
// Contract, per slot: forward, then backward_input once, then backward_weight
// once, possibly after other slots' forwards and Bs and Ws (select the slot with
// set_slot() before each). B then W computes the same dx and adds the same
// gradients, bit for bit, as backward(): the same kernels on the same inputs,
// only at other times. So W needs the forward's input x and B's dy alive until
// it runs: the slot keeps them (handles, not copies), and release_slot() after W
// frees them. Between B and W a slot therefore still holds part of a
// micro-batch's activations: what W reads.
//
// Which layers split: Linear (its dW = dy^T x and db = sum dy are the W), and
// the layers made of Linears (CausalSelfAttention) or of other layers
// (Sequential, Residual) split their parts. A layer without parameters has an
// empty W. Any other layer with parameters (LayerNorm, the embeddings) keeps the
// default: B runs its fused backward (gradients included) and W only announces
// its parameters to grad_ready; the result is the same, its weight work just
// runs in B. grad_ready fires in W, never in B, in the fused backward's order.

/// @brief The interface every layer implements.
class Layer {
 public:
  /// @brief Virtual: layers are owned through std::unique_ptr<Layer>.
  virtual ~Layer() = default;
  /// @brief The layer's name (its parameters' names start with it).
  /// @return the name, e.g. "fc0".
  const std::string& name() const noexcept { return name_; }
  /// @brief What kind of layer this is.
  /// @return e.g. "Linear".
  virtual std::string kind() const = 0;
  /// @brief Computes the output and caches what backward needs (in the current slot).
  /// @param[in] x the input; its shape is given in each layer's description.
  /// @return the output, owned by the layer.
  /// @throws dtl::InvalidArgument on a wrong shape, dtype or device.
  virtual const Tensor& forward(const Tensor& x) = 0;
  /// @brief Adds dL/dparameter into each grad and returns dL/dx (current slot).
  /// @param[in] dy dL/dy, the shape of forward's output.
  /// @param[in] grad_ready called for each parameter once its grad is final, in reverse
  ///            parameter order (may be empty).
  /// @return dL/dx, owned by the layer (undefined for an input of token ids).
  /// @throws dtl::InvalidArgument if dy's shape differs from the output's, or forward was not called.
  virtual const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) = 0;
  /// @brief B, the backward's input half: returns dL/dx and keeps dy for backward_weight()
  /// (current slot; Note [Split backward]). Adds no gradient of a layer that splits.
  ///
  /// The default (layers that do not split) runs backward(dy, {}): the weight
  /// gradients are added here, and backward_weight() only announces them.
  /// @param[in] dy dL/dy, the shape of forward's output.
  /// @return dL/dx, owned by the layer (undefined for an input of token ids).
  /// @throws dtl::InvalidArgument if dy's shape differs from the output's, or forward was not called.
  virtual const Tensor& backward_input(const Tensor& dy) { return backward(dy, GradReadyFn()); }
  /// @brief W, the backward's weight half: adds dL/dparameter into each grad, with the
  /// input and dy of the current slot's forward and backward_input() (Note [Split backward]).
  ///
  /// Call it once per backward_input(), any time before the slot is released. The
  /// default (no split) announces the parameters, last first: its B added the gradients.
  /// @param[in] grad_ready called for each parameter once its grad is final, in the
  ///            fused backward's order (may be empty).
  /// @throws dtl::InvalidArgument if the slot has no backward_input() waiting for its W
  ///         (layers that split).
  virtual void backward_weight(const GradReadyFn& grad_ready);
  /// @brief The parameters, in a fixed order (the forward order).
  /// @return pointers into this layer (valid while it lives).
  virtual std::vector<Parameter*> parameters() { return {}; }
  /// @brief The output shape for an input shape, without computing anything.
  /// @param[in] input the input shape.
  /// @return the output shape.
  /// @throws dtl::InvalidArgument if the input shape is not accepted.
  virtual Shape output_shape(const Shape& input) const = 0;
  /// @brief Selects the activation slot used by later forward and backward calls.
  /// @param[in] slot >= 0 (default 0).
  virtual void set_slot(int slot) { slot_ = slot; }
  /// @brief Frees the caches of one slot.
  /// @param[in] slot the slot.
  virtual void release_slot(int slot) = 0;

 protected:
  /// @brief A layer called `name`.
  /// @param[in] name the layer's name.
  explicit Layer(std::string name) : name_(std::move(name)) {}
  std::string name_;  ///< the layer's name
  int slot_ = 0;      ///< the current activation slot
};

// ---------------------------------------------------------------------------
// Containers
// ---------------------------------------------------------------------------

/// @brief Layers applied one after another; backward runs them in reverse.
class Sequential : public Layer {
 public:
  /// @brief A sequence of `layers` (at least one).
  /// @param[in] name the container's name.
  /// @param[in] layers the layers, in forward order.
  /// @throws dtl::InvalidArgument if `layers` is empty or holds a null.
  Sequential(std::string name, std::vector<std::unique_ptr<Layer>> layers);
  /// @brief "Sequential".
  /// @return the kind.
  std::string kind() const override { return "Sequential"; }
  /// @brief Each layer's forward on the previous one's output.
  /// @param[in] x the first layer's input.
  /// @return the last layer's output.
  const Tensor& forward(const Tensor& x) override;
  /// @brief Each layer's backward, last layer first.
  /// @param[in] dy the last layer's output gradient.
  /// @param[in] grad_ready passed to every layer.
  /// @return the first layer's dx.
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief Each layer's backward_input(), last layer first.
  /// @param[in] dy the last layer's output gradient.
  /// @return the first layer's dx.
  const Tensor& backward_input(const Tensor& dy) override;
  /// @brief Each layer's backward_weight(), last layer first.
  /// @param[in] grad_ready passed to every layer.
  void backward_weight(const GradReadyFn& grad_ready) override;
  /// @brief Every layer's parameters, in order.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override;
  /// @brief The shape through every layer.
  /// @param[in] input the input shape.
  /// @return the output shape.
  Shape output_shape(const Shape& input) const override;
  /// @brief Selects the slot in every layer.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees one slot in every layer.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief The layers.
  /// @return the layers, in forward order.
  const std::vector<std::unique_ptr<Layer>>& layers() const noexcept { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
};

/// @brief A residual connection: y = x + f(x); dx = dy + f'(x)^T dy. f keeps the shape.
class Residual : public Layer {
 public:
  /// @brief Wraps `inner` (usually a Sequential) in a residual connection.
  /// @param[in] name the block's name.
  /// @param[in] inner f, whose output shape equals its input shape.
  /// @throws dtl::InvalidArgument if inner is null.
  Residual(std::string name, std::unique_ptr<Layer> inner);
  /// @brief "Residual".
  /// @return the kind.
  std::string kind() const override { return "Residual"; }
  /// @brief y = x + f(x).
  /// @param[in] x any shape f accepts.
  /// @return y, same shape.
  const Tensor& forward(const Tensor& x) override;
  /// @brief dx = dy + (backward of f)(dy).
  /// @param[in] dy same shape as y.
  /// @param[in] grad_ready passed to f.
  /// @return dx.
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief dx = dy + (backward_input of f)(dy).
  /// @param[in] dy same shape as y.
  /// @return dx.
  const Tensor& backward_input(const Tensor& dy) override;
  /// @brief f's backward_weight().
  /// @param[in] grad_ready passed to f.
  void backward_weight(const GradReadyFn& grad_ready) override { inner_->backward_weight(grad_ready); }
  /// @brief f's parameters.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  /// @brief The same shape (checked against f).
  /// @param[in] input the input shape.
  /// @return input.
  Shape output_shape(const Shape& input) const override;
  /// @brief Selects the slot here and in f.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees one slot here and in f.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief f.
  /// @return the wrapped layer.
  Layer& inner() noexcept { return *inner_; }

 private:
  struct Cache {
    Tensor y, dx;
  };
  const Tensor& skip_sum(const Tensor& dy, const Tensor& dinner);
  std::unique_ptr<Layer> inner_;
  SlotCaches<Cache> caches_;
};

}  // namespace dtl::nn
