// Embedding and PositionalEmbedding: forward and backward, as loops over raw
// pointers (the CPU kernels below), dispatched by device and dtype.
#include "harness/nn/embedding.h"

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch, require_input, ensure, notify, ...

namespace {

// ---------------------------------------------------------------------------
// CPU kernels, tagged OnCpu; kernels/embedding.cu holds the OnCuda ones (Note
// [One dispatch point] in layer_util.h). N = B*T tokens, C channels.
// ---------------------------------------------------------------------------

// Every token id in [0, V), or an error naming the first one that is not.
void check_tokens(OnCpu, const std::int32_t* tokens, std::int64_t n, std::int64_t vocab, const std::string& where) {
  for (std::int64_t i = 0; i < n; ++i) {
    DTL_REQUIRE_ARG(tokens[i] >= 0 && tokens[i] < vocab, where.c_str(), "x",
                    "holds token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        ", outside [0, " + std::to_string(vocab) + ")");
  }
}
// On the GPU the ids are not read back (that would wait for the stream): the
// kernel writes a row of NaN for an id out of range, and the loss turns NaN.
void check_tokens(OnCuda, const std::int32_t*, std::int64_t, std::int64_t, const std::string&) {}

// y (N, C) = W (V, C) [tokens (N)].
template <typename T>
void embedding_forward(OnCpu, T* y, const std::int32_t* tokens, const T* w, std::int64_t n, std::int64_t /*vocab*/,
                       std::int64_t c) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < c; ++j) y[i * c + j] = w[tokens[i] * c + j];
}

// dW[tokens[i]] += dy[i], i = 0 .. N-1.
template <typename T>
void embedding_backward(OnCpu, T* dw, const std::int32_t* tokens, const T* dy, std::int64_t n, std::int64_t /*vocab*/,
                        std::int64_t c) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < c; ++j) dw[tokens[i] * c + j] += dy[i * c + j];
}

// y (B, T, C) = x + P[t].
template <typename T>
void positional_forward(OnCpu, T* y, const T* x, const T* p, std::int64_t batch, std::int64_t seq, std::int64_t c) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < seq; ++t)
      for (std::int64_t j = 0; j < c; ++j) {
        const std::int64_t i = (b * seq + t) * c + j;
        y[i] = x[i] + p[t * c + j];
      }
}

// dP[t] += sum_b dy[b, t].
template <typename T>
void positional_backward(OnCpu, T* dp, const T* dy, std::int64_t batch, std::int64_t seq, std::int64_t c) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < seq; ++t)
      for (std::int64_t j = 0; j < c; ++j) dp[t * c + j] += dy[(b * seq + t) * c + j];
}

}  // namespace

Embedding::Embedding(std::string name, std::int64_t vocab, std::int64_t channels, DType dtype, Rng& rng,
                     double init_std)
    : Layer(std::move(name)), vocab_(vocab), channels_(channels) {
  DTL_REQUIRE_ARG(vocab >= 1, "Embedding", "vocab", "must be at least 1, not " + std::to_string(vocab));
  DTL_REQUIRE_ARG(channels >= 1, "Embedding", "channels", "must be at least 1, not " + std::to_string(channels));
  require_float_dtype(dtype, "Embedding");
  weight_ = make_parameter(name_ + ".weight", {vocab, channels}, dtype);
  init_parameter(weight_, rng, init_std, 0.0);
}

Shape Embedding::output_shape(const Shape& input) const {
  Shape out = input;
  out.push_back(channels_);
  return out;
}

const Tensor& Embedding::forward(const Tensor& x) {
  require_input(x, DType::kI32, -1, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;
  ensure(cache.y, output_shape(x.shape()), weight_.value.dtype(), x.device());
  dispatch("Embedding::forward", {{"x", x}, {"weight", weight_.value}}, weight_.value.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             check_tokens(on, x.data<std::int32_t>(), x.numel(), vocab_, name_ + ".forward");
             embedding_forward(on, cache.y.data<T>(), x.data<std::int32_t>(), weight_.value.data<T>(), x.numel(),
                               vocab_, channels_);
           });
  return cache.y;
}

const Tensor& Embedding::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  static const Tensor kNoGradient;  // token ids are not differentiable
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  dispatch("Embedding::backward", {{"dy", dy}, {"x", cache.x}, {"weight.grad", weight_.grad}}, dy.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             embedding_backward(on, weight_.grad.data<T>(), cache.x.data<std::int32_t>(), dy.data<T>(),
                                cache.x.numel(), vocab_, channels_);
           });
  notify(grad_ready, weight_);
  return kNoGradient;
}

PositionalEmbedding::PositionalEmbedding(std::string name, std::int64_t context, std::int64_t channels,
                                         DType dtype, Rng& rng, double init_std)
    : Layer(std::move(name)), context_(context), channels_(channels) {
  DTL_REQUIRE_ARG(context >= 1, "PositionalEmbedding", "context", "must be at least 1, not " + std::to_string(context));
  DTL_REQUIRE_ARG(channels >= 1, "PositionalEmbedding", "channels",
                  "must be at least 1, not " + std::to_string(channels));
  require_float_dtype(dtype, "PositionalEmbedding");
  weight_ = make_parameter(name_ + ".weight", {context, channels}, dtype);
  init_parameter(weight_, rng, init_std, 0.0);
}

Shape PositionalEmbedding::output_shape(const Shape& input) const {
  DTL_REQUIRE_ARG(input.size() == 3 && input[2] == channels_ && input[1] <= context_,
                  (name_ + ".output_shape").c_str(), "input",
                  "is " + to_string(input) + ", expected (B, T <= " + std::to_string(context_) + ", " +
                      std::to_string(channels_) + ")");
  return input;
}

const Tensor& PositionalEmbedding::forward(const Tensor& x) {
  require_input(x, weight_.value.dtype(), channels_, name_, "x");
  output_shape(x.shape());  // checks (B, T <= context, C)
  Cache& cache = caches_.at(slot_);
  ensure(cache.y, x.shape(), x.dtype(), x.device());
  const std::int64_t batch = x.dim(0), seq = x.dim(1);
  dispatch("PositionalEmbedding::forward", {{"x", x}, {"weight", weight_.value}}, x.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             positional_forward(on, cache.y.data<T>(), x.data<T>(), weight_.value.data<T>(), batch, seq, channels_);
           });
  return cache.y;
}

const Tensor& PositionalEmbedding::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype(), dy.device());
  const std::int64_t batch = dy.dim(0), seq = dy.dim(1);
  dispatch("PositionalEmbedding::backward", {{"dy", dy}, {"weight.grad", weight_.grad}}, dy.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             positional_backward(on, weight_.grad.data<T>(), dy.data<T>(), batch, seq, channels_);
           });
  notify(grad_ready, weight_);
  cache.dx.copy_from(dy);  // the sum passes the gradient straight through (on the GPU: queued, no wait)
  return cache.dx;
}

}  // namespace dtl::nn
