// LayerNorm: forward and backward.
// Written out as loops over raw pointers (llm.c style). Each CPU kernel is a
// template over the element type T (float for training, double for the
// gradient checks) tagged OnCpu; kernels/layernorm.cu holds the OnCuda one.
// See Note [One dispatch point] in layer_util.h.
#include "harness/nn/normalization.h"

#include <cmath>

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch_float, require_input, ensure, notify, ...

namespace {

// ---------------------------------------------------------------------------
// Kernels. N rows; each function says the shape of every pointer.
// ---------------------------------------------------------------------------

// y, mean, rstd from x (N, C) with weight w (C), bias b (C).
template <typename T>
void layernorm_forward(OnCpu, T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, std::int64_t n,
                       std::int64_t c) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;
    T m = 0;
    for (std::int64_t j = 0; j < c; ++j) m += xi[j];
    m /= static_cast<T>(c);
    T var = 0;  // biased variance, as in PyTorch's LayerNorm
    for (std::int64_t j = 0; j < c; ++j) var += (xi[j] - m) * (xi[j] - m);
    var /= static_cast<T>(c);
    const T r = T(1) / std::sqrt(var + T(1e-5));
    for (std::int64_t j = 0; j < c; ++j) y[i * c + j] = (xi[j] - m) * r * w[j] + b[j];
    mean[i] = m;
    rstd[i] = r;
  }
}

// dx (N, C) = rstd (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w;
// dw (C) += sum_n dy * norm; db (C) += sum_n dy.
template <typename T>
void layernorm_backward(OnCpu, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                        const T* rstd, std::int64_t n, std::int64_t c) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* dyi = dy + i * c;
    const T* xi = x + i * c;
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      const T norm = (xi[j] - mean[i]) * rstd[i];
      const T dnorm = dyi[j] * w[j];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<T>(c);
    dnorm_norm_mean /= static_cast<T>(c);
    for (std::int64_t j = 0; j < c; ++j) {
      const T norm = (xi[j] - mean[i]) * rstd[i];
      const T dnorm = dyi[j] * w[j];
      db[j] += dyi[j];
      dw[j] += norm * dyi[j];
      dx[i * c + j] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[i];
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------

LayerNorm::LayerNorm(std::string name, std::int64_t channels, DType dtype)
    : Layer(std::move(name)), channels_(channels) {
  DTL_REQUIRE_ARG(channels >= 1, "LayerNorm", "channels", "must be at least 1, not " + std::to_string(channels));
  require_float_dtype(dtype, "LayerNorm");
  weight_ = make_parameter(name_ + ".weight", {channels}, dtype);
  bias_ = make_parameter(name_ + ".bias", {channels}, dtype);
  fill(weight_.value, 1.0);
}

Shape LayerNorm::output_shape(const Shape& input) const {
  DTL_REQUIRE_ARG(!input.empty() && input.back() == channels_, (name_ + ".output_shape").c_str(), "input",
                  "is " + to_string(input) + ", expected last dimension " + std::to_string(channels_));
  return input;
}

const Tensor& LayerNorm::forward(const Tensor& x) {
  require_input(x, weight_.value.dtype(), channels_, name_, "x");
  Cache& cache = caches_.at(slot_);
  const std::int64_t n = x.numel() / channels_;
  cache.x = x;
  ensure(cache.y, x.shape(), x.dtype(), x.device());
  ensure(cache.mean, {n}, x.dtype(), x.device());
  ensure(cache.rstd, {n}, x.dtype(), x.device());
  dispatch("LayerNorm::forward", {{"x", x}, {"weight", weight_.value}}, x.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    layernorm_forward(on, cache.y.data<T>(), cache.mean.data<T>(), cache.rstd.data<T>(), x.data<T>(),
                      weight_.value.data<T>(), bias_.value.data<T>(), n, channels_);
  });
  return cache.y;
}

const Tensor& LayerNorm::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype(), dy.device());
  const std::int64_t n = dy.numel() / channels_;
  dispatch("LayerNorm::backward", {{"dy", dy}, {"weight.grad", weight_.grad}}, dy.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    layernorm_backward(on, cache.dx.data<T>(), weight_.grad.data<T>(), bias_.grad.data<T>(), dy.data<T>(),
                       cache.x.data<T>(), weight_.value.data<T>(), cache.mean.data<T>(), cache.rstd.data<T>(), n,
                       channels_);
  });
  notify(grad_ready, bias_);
  notify(grad_ready, weight_);
  return cache.dx;
}

}  // namespace dtl::nn
