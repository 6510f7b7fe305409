// Embedding and PositionalEmbedding: forward and backward, as loops over raw
// pointers, dispatched on the parameters' dtype (f32 or f64).
#include "harness/nn/embedding.h"

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch_float, require_input, ensure, notify, ...

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
  ensure(cache.y, output_shape(x.shape()), weight_.value.dtype());
  const std::int32_t* tokens = x.data<std::int32_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    DTL_REQUIRE_ARG(tokens[i] >= 0 && tokens[i] < vocab_, (name_ + ".forward").c_str(), "x",
                    "holds token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        ", outside [0, " + std::to_string(vocab_) + ")");
  }
  dispatch_float(weight_.value.dtype(), "Embedding::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight_.value.data<T>();
    T* y = cache.y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      for (std::int64_t j = 0; j < channels_; ++j) y[i * channels_ + j] = w[tokens[i] * channels_ + j];
  });
  return cache.y;
}

const Tensor& Embedding::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  static const Tensor kNoGradient;  // token ids are not differentiable
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  const std::int32_t* tokens = cache.x.data<std::int32_t>();
  dispatch_float(dy.dtype(), "Embedding::backward", [&](auto zero) {
    using T = decltype(zero);
    T* dw = weight_.grad.data<T>();
    const T* g = dy.data<T>();
    for (std::int64_t i = 0; i < cache.x.numel(); ++i)
      for (std::int64_t j = 0; j < channels_; ++j) dw[tokens[i] * channels_ + j] += g[i * channels_ + j];
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
  ensure(cache.y, x.shape(), x.dtype());
  const std::int64_t batch = x.dim(0), seq = x.dim(1);
  dispatch_float(x.dtype(), "PositionalEmbedding::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();
    const T* p = weight_.value.data<T>();
    T* y = cache.y.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t t = 0; t < seq; ++t)
        for (std::int64_t j = 0; j < channels_; ++j) {
          const std::int64_t i = (b * seq + t) * channels_ + j;
          y[i] = in[i] + p[t * channels_ + j];
        }
  });
  return cache.y;
}

const Tensor& PositionalEmbedding::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype());
  const std::int64_t batch = dy.dim(0), seq = dy.dim(1);
  dispatch_float(dy.dtype(), "PositionalEmbedding::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* g = dy.data<T>();
    T* dp = weight_.grad.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t t = 0; t < seq; ++t)
        for (std::int64_t j = 0; j < channels_; ++j) dp[t * channels_ + j] += g[(b * seq + t) * channels_ + j];
  });
  notify(grad_ready, weight_);
  cache.dx.copy_from(dy);  // the sum passes the gradient straight through
  return cache.dx;
}

}  // namespace dtl::nn
