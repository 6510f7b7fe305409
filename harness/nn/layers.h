/// @file
/// @brief Layers with explicit forward and backward: Linear, ReLU, GELU, LayerNorm,
/// Embedding, PositionalEmbedding, CausalSelfAttention, Sequential, Residual, and the
/// softmax cross-entropy loss.
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
///   - device: CPU. (The CUDA kernels in cuda_ops.h are building blocks, not wired in.)
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
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/nn/random.h"
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
// Linear
// ---------------------------------------------------------------------------

/// @brief y = x W^T + b. x is (N..., in), W is (out, in), b is (out), y is (N..., out).
///
/// Costs 2*N*in*out flops forward and twice that backward (dW and dx).
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
  struct Cache {
    Tensor x, y, dx;
  };
  std::int64_t in_, out_;
  bool has_bias_;
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

 private:
  struct Cache {
    Tensor x, y, dx;
  };
  SlotCaches<Cache> caches_;
};

// ---------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Causal self-attention
// ---------------------------------------------------------------------------

/// @brief Multi-head causal self-attention with its two projections.
///
/// x (B, T, C) -> qkv = Linear(C, 3C) -> (B, T, 3C), split into q, k, v, each
/// (B, T, NH, hs); per head, att = softmax(q k^T / sqrt(hs)) with position t
/// seeing only t2 <= t (causal), (B, NH, T, T); out = att v, heads side by side
/// (B, T, C); y = Linear(C, C)(out). Parameters: qkv.weight, qkv.bias,
/// proj.weight, proj.bias. The attention itself is loops, as in llm.c.
class CausalSelfAttention : public Layer {
 public:
  /// @brief Attention over `channels` with `heads` heads.
  /// @param[in] name the layer's name; sublayers name.qkv and name.proj.
  /// @param[in] channels C, a multiple of heads.
  /// @param[in] heads NH.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in,out] rng draws the weights (qkv first, then proj).
  /// @param[in] init_std the qkv weights' standard deviation.
  /// @param[in] proj_std the proj weights' standard deviation (GPT-2 scales it by 1/sqrt(2 layers)).
  /// @throws dtl::InvalidArgument if channels is not a positive multiple of heads.
  CausalSelfAttention(std::string name, std::int64_t channels, std::int64_t heads, DType dtype,
                      Rng& rng, double init_std = 0.02, double proj_std = 0.02);
  /// @brief "CausalSelfAttention".
  /// @return the kind.
  std::string kind() const override { return "CausalSelfAttention"; }
  /// @brief y (B, T, C) from x (B, T, C).
  /// @param[in] x (B, T, C).
  /// @return y (B, T, C).
  const Tensor& forward(const Tensor& x) override;
  /// @brief Backward through proj, the attention, then qkv.
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for proj.bias, proj.weight, qkv.bias, qkv.weight.
  /// @return dx (B, T, C).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief qkv.weight, qkv.bias, proj.weight, proj.bias.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override;
  /// @brief The same shape.
  /// @param[in] input (B, T, C).
  /// @return input.
  Shape output_shape(const Shape& input) const override;
  /// @brief Selects the slot here and in both projections.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees the caches of one slot here and in both projections.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;

 private:
  struct Cache {
    Tensor qkv, att, out, dqkv;
  };
  std::int64_t channels_, heads_;
  Linear qkv_, proj_;
  SlotCaches<Cache> caches_;
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
  std::unique_ptr<Layer> inner_;
  SlotCaches<Cache> caches_;
};

/// @brief The activation of an MLP block.
enum class Activation { kReLU, kGELU };

/// @brief A residual MLP block: y = x + Linear(hidden, C)(act(Linear(C, hidden)(LayerNorm(x)))).
/// x and y are (N..., C). Sublayers name.ln, name.fc, name.act, name.proj.
/// @param[in] name the block's name.
/// @param[in] channels C.
/// @param[in] hidden the inner width (GPT: 4C).
/// @param[in] activation ReLU or GELU.
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @param[in,out] rng draws fc's weights, then proj's.
/// @param[in] init_std fc's weight standard deviation (<= 0: uniform +-1/sqrt(fan-in)).
/// @param[in] proj_std proj's weight standard deviation (<= 0: uniform).
/// @return the block (a Residual around a Sequential).
std::unique_ptr<Layer> make_mlp_block(const std::string& name, std::int64_t channels,
                                      std::int64_t hidden, Activation activation, DType dtype,
                                      Rng& rng, double init_std = 0.02, double proj_std = 0.02);

/// @brief A residual attention block: y = x + CausalSelfAttention(LayerNorm(x)). x and y are (B, T, C).
/// Sublayers name.ln and name.attn.
/// @param[in] name the block's name.
/// @param[in] channels C.
/// @param[in] heads NH (divides C).
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @param[in,out] rng draws the weights.
/// @param[in] init_std qkv's weight standard deviation.
/// @param[in] proj_std proj's weight standard deviation.
/// @return the block (a Residual around a Sequential).
std::unique_ptr<Layer> make_attention_block(const std::string& name, std::int64_t channels,
                                            std::int64_t heads, DType dtype, Rng& rng,
                                            double init_std = 0.02, double proj_std = 0.02);

// ---------------------------------------------------------------------------
// Loss
// ---------------------------------------------------------------------------

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
