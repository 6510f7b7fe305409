// The layers' forward and backward passes, written out as loops over raw
// pointers (llm.c style). Each kernel is a template over the element type T
// (float for training, double for the gradient checks); the layer methods
// check shapes and dispatch on the dtype.
#include "harness/nn/layers.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "harness/error.h"
#include "harness/nn/gemm.h"

namespace dtl::nn {

namespace {

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// Runs f(T{}) with T = float or double, matching `dtype`.
template <typename F>
void dispatch_float(DType dtype, const char* function, F&& f) {
  if (dtype == DType::kF32) {
    f(float{});
  } else if (dtype == DType::kF64) {
    f(double{});
  } else {
    throw_invalid_argument(function, "dtype", std::string("must be f32 or f64, not ") + to_string(dtype));
  }
}

void require_float_dtype(DType dtype, const char* function) {
  DTL_REQUIRE_ARG(dtype == DType::kF32 || dtype == DType::kF64, function, "dtype",
                  std::string("must be f32 or f64, not ") + to_string(dtype));
}

// x must be on the CPU, have `dtype`, at least one dimension, and last dimension `last`.
void require_input(const Tensor& x, DType dtype, std::int64_t last, const std::string& layer,
                   const char* argument) {
  const std::string where = layer + ".forward";
  DTL_REQUIRE_ARG(x.defined(), where.c_str(), argument, "is undefined");
  DTL_REQUIRE_ARG(x.device() == Device::kCpu, where.c_str(), argument,
                  "is on the GPU; the layers compute on the CPU");
  DTL_REQUIRE_ARG(x.dtype() == dtype, where.c_str(), argument,
                  std::string("is ") + to_string(x.dtype()) + ", the layer's parameters are " + to_string(dtype));
  DTL_REQUIRE_ARG(x.ndim() >= 1 && (last < 0 || x.dim(-1) == last), where.c_str(), argument,
                  "has shape " + to_string(x.shape()) + ", expected last dimension " + std::to_string(last));
}

// dy must match the output y of the forward it is the gradient of.
void require_grad(const Tensor& dy, const Tensor& y, const std::string& layer) {
  const std::string where = layer + ".backward";
  DTL_REQUIRE_ARG(y.defined(), where.c_str(), "dy", "came before any forward in this slot");
  DTL_REQUIRE_ARG(dy.defined() && dy.shape() == y.shape() && dy.dtype() == y.dtype(), where.c_str(), "dy",
                  "has shape " + (dy.defined() ? to_string(dy.shape()) : std::string("(undefined)")) +
                      "; the output was " + to_string(y.shape()));
}

// Makes `t` an activation buffer of this shape and dtype. A buffer of the right
// shape is reused (overwritten): a layer's output lives until the next forward
// in the same slot, so steady-state training allocates nothing.
void ensure(Tensor& t, const Shape& shape, DType dtype) {
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype) {
    t = Tensor();  // free the old buffer first, so the peak never holds both
    t = Tensor::zeros(shape, dtype, MemoryCategory::kActivations);
  }
}

void notify(const GradReadyFn& grad_ready, Parameter& p) {
  if (grad_ready) grad_ready(p);
}

Parameter make_parameter(const std::string& name, const Shape& shape, DType dtype) {
  return Parameter{name, Tensor::zeros(shape, dtype, MemoryCategory::kParameters),
                   Tensor::zeros(shape, dtype, MemoryCategory::kGradients)};
}

// Fills a parameter from rng: normal(0, std) when std > 0, else uniform +-bound.
void init_parameter(Parameter& p, Rng& rng, double std, double bound) {
  dispatch_float(p.value.dtype(), "init_parameter", [&](auto zero) {
    using T = decltype(zero);
    for (T& v : p.value.span<T>()) v = static_cast<T>(std > 0 ? rng.normal(0.0, std) : rng.uniform(-bound, bound));
  });
}

void fill(const Tensor& t, double value) {
  dispatch_float(t.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    for (T& v : t.span<T>()) v = static_cast<T>(value);
  });
}

// ---------------------------------------------------------------------------
// Kernels. N rows; each function says the shape of every pointer.
// ---------------------------------------------------------------------------

// y (N, out) = x (N, in) W^T (W is (out, in)) + b (out). The bias goes in
// first, row by row, and the GEMM accumulates onto it (beta = 1): one pass
// over y instead of a second loop after the GEMM.
template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* b, std::int64_t n, std::int64_t in, std::int64_t out) {
  if (b != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) std::memcpy(y + i * out, b, static_cast<std::size_t>(out) * sizeof(T));
  }
  gemm(false, true, n, out, in, T(1), x, in, w, in, b != nullptr ? T(1) : T(0), y, out);
}

// db (out) += sum_n dy (N, out). __restrict__: db and dy never overlap, which
// lets the compiler vectorize the inner loop.
template <typename T>
void linear_backward_bias(T* __restrict__ db, const T* __restrict__ dy, std::int64_t n, std::int64_t out) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < out; ++o) db[o] += dy[i * out + o];
}

// dW (out, in) += dy^T (out, N) x (N, in);  dx (N, in) = dy (N, out) W (out, in).
template <typename T>
void linear_backward_weight(T* dw, const T* dy, const T* x, std::int64_t n, std::int64_t in, std::int64_t out) {
  gemm(true, false, out, in, n, T(1), dy, out, x, in, T(1), dw, in);
}
template <typename T>
void linear_backward_input(T* dx, const T* dy, const T* w, std::int64_t n, std::int64_t in, std::int64_t out) {
  gemm(false, false, n, in, out, T(1), dy, out, w, in, T(0), dx, in);
}

template <typename T>
T gelu(T x) {
  const T s = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
  return T(0.5) * x * (T(1) + std::tanh(s * (x + T(0.044715) * x * x * x)));
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 * 0.044715 x^2), u = s (x + 0.044715 x^3).
template <typename T>
T gelu_grad(T x) {
  const T s = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
  const T u = s * (x + T(0.044715) * x * x * x);
  const T th = std::tanh(u);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * s * (T(1) + T(3) * T(0.044715) * x * x);
}

// y, mean, rstd from x (N, C) with weight w (C), bias b (C).
template <typename T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, std::int64_t n,
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
void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
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

// Attention core. qkv (B, T, 3C) holds q, k, v side by side; att (B, NH, T, T);
// out (B, T, C). Position t attends to t2 <= t only; att[.., t, t2 > t] stays 0.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, std::int64_t batch, std::int64_t seq, std::int64_t c,
                       std::int64_t heads) {
  const std::int64_t hs = c / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* q = qkv + (b * seq + t) * 3 * c + h * hs;
        T* a = att + ((b * heads + h) * seq + t) * seq;
        // scores q . k(t2) / sqrt(hs), and their max (for a stable softmax)
        T maxval = -INFINITY;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* k = qkv + (b * seq + t2) * 3 * c + c + h * hs;
          T dot = 0;
          for (std::int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          a[t2] = dot * scale;
          if (a[t2] > maxval) maxval = a[t2];
        }
        T sum = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - maxval);
          sum += a[t2];
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) a[t2] /= sum;
        for (std::int64_t t2 = t + 1; t2 < seq; ++t2) a[t2] = 0;
        // out = sum_t2 att[t2] v(t2)
        T* o = out + (b * seq + t) * c + h * hs;
        for (std::int64_t i = 0; i < hs; ++i) o[i] = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          for (std::int64_t i = 0; i < hs; ++i) o[i] += a[t2] * v[i];
        }
      }
    }
  }
}

// dqkv (B, T, 3C) += from dout (B, T, C), given att (B, NH, T, T) and qkv.
// Per (b, t, h): datt[t2] = dout . v(t2); dv(t2) += att[t2] dout;
// softmax backward: dpre[t2] = att[t2] (datt[t2] - sum_t3 att[t3] datt[t3]);
// dq += dpre[t2] k(t2) / sqrt(hs); dk(t2) += dpre[t2] q / sqrt(hs).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* att, const T* qkv, std::int64_t batch,
                        std::int64_t seq, std::int64_t c, std::int64_t heads) {
  const std::int64_t hs = c / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  std::vector<T> datt(static_cast<std::size_t>(seq));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* a = att + ((b * heads + h) * seq + t) * seq;
        const T* dout_t = dout + (b * seq + t) * c + h * hs;
        const T* q = qkv + (b * seq + t) * 3 * c + h * hs;
        T* dq = dqkv + (b * seq + t) * 3 * c + h * hs;
        T weighted = 0;  // sum_t2 att[t2] datt[t2]
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          T* dv = dqkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          T d = 0;
          for (std::int64_t i = 0; i < hs; ++i) {
            d += dout_t[i] * v[i];
            dv[i] += a[t2] * dout_t[i];
          }
          datt[static_cast<std::size_t>(t2)] = d;
          weighted += a[t2] * d;
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T dpre = a[t2] * (datt[static_cast<std::size_t>(t2)] - weighted) * scale;
          const T* k = qkv + (b * seq + t2) * 3 * c + c + h * hs;
          T* dk = dqkv + (b * seq + t2) * 3 * c + c + h * hs;
          for (std::int64_t i = 0; i < hs; ++i) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Linear
// ---------------------------------------------------------------------------

Linear::Linear(std::string name, std::int64_t in, std::int64_t out, DType dtype, Rng& rng, double init_std,
               bool bias)
    : Layer(std::move(name)), in_(in), out_(out), has_bias_(bias) {
  DTL_REQUIRE_ARG(in >= 1, "Linear", "in", "must be at least 1, not " + std::to_string(in));
  DTL_REQUIRE_ARG(out >= 1, "Linear", "out", "must be at least 1, not " + std::to_string(out));
  require_float_dtype(dtype, "Linear");
  weight_ = make_parameter(name_ + ".weight", {out, in}, dtype);
  init_parameter(weight_, rng, init_std, 1.0 / std::sqrt(static_cast<double>(in)));
  if (has_bias_) bias_ = make_parameter(name_ + ".bias", {out}, dtype);
}

std::vector<Parameter*> Linear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

Shape Linear::output_shape(const Shape& input) const {
  DTL_REQUIRE_ARG(!input.empty() && input.back() == in_, (name_ + ".output_shape").c_str(), "input",
                  "is " + to_string(input) + ", expected last dimension " + std::to_string(in_));
  Shape out = input;
  out.back() = out_;
  return out;
}

const Tensor& Linear::forward(const Tensor& x) {
  require_input(x, weight_.value.dtype(), in_, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;  // a handle: backward needs x for dW
  ensure(cache.y, output_shape(x.shape()), x.dtype());
  const std::int64_t n = x.numel() / in_;
  dispatch_float(x.dtype(), "Linear::forward", [&](auto zero) {
    using T = decltype(zero);
    linear_forward<T>(cache.y.data<T>(), x.data<T>(), weight_.value.data<T>(),
                      has_bias_ ? bias_.value.data<T>() : nullptr, n, in_, out_);
  });
  return cache.y;
}

const Tensor& Linear::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, cache.x.shape(), dy.dtype());
  const std::int64_t n = dy.numel() / out_;
  dispatch_float(dy.dtype(), "Linear::backward", [&](auto zero) {
    using T = decltype(zero);
    // The bias and weight gradients are final before dx is computed: announce
    // them at once, so a bucket can start its allreduce while dx is computed.
    if (has_bias_) {
      linear_backward_bias<T>(bias_.grad.data<T>(), dy.data<T>(), n, out_);
      notify(grad_ready, bias_);
    }
    linear_backward_weight<T>(weight_.grad.data<T>(), dy.data<T>(), cache.x.data<T>(), n, in_, out_);
    notify(grad_ready, weight_);
    linear_backward_input<T>(cache.dx.data<T>(), dy.data<T>(), weight_.value.data<T>(), n, in_, out_);
  });
  return cache.dx;
}

// ---------------------------------------------------------------------------
// ReLU and GELU
// ---------------------------------------------------------------------------

const Tensor& ReLU::forward(const Tensor& x) {
  require_input(x, x.dtype(), -1, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;
  ensure(cache.y, x.shape(), x.dtype());
  dispatch_float(x.dtype(), "ReLU::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();
    T* out = cache.y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > T(0) ? in[i] : T(0);
  });
  return cache.y;
}

const Tensor& ReLU::backward(const Tensor& dy, const GradReadyFn& /*grad_ready*/) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype());
  dispatch_float(dy.dtype(), "ReLU::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* x = cache.x.data<T>();
    const T* g = dy.data<T>();
    T* dx = cache.dx.data<T>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) dx[i] = x[i] > T(0) ? g[i] : T(0);
  });
  return cache.dx;
}

const Tensor& GELU::forward(const Tensor& x) {
  require_input(x, x.dtype(), -1, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;
  ensure(cache.y, x.shape(), x.dtype());
  dispatch_float(x.dtype(), "GELU::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();
    T* out = cache.y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = gelu(in[i]);
  });
  return cache.y;
}

const Tensor& GELU::backward(const Tensor& dy, const GradReadyFn& /*grad_ready*/) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype());
  dispatch_float(dy.dtype(), "GELU::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* x = cache.x.data<T>();
    const T* g = dy.data<T>();
    T* dx = cache.dx.data<T>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) dx[i] = gelu_grad(x[i]) * g[i];
  });
  return cache.dx;
}

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
  ensure(cache.y, x.shape(), x.dtype());
  ensure(cache.mean, {n}, x.dtype());
  ensure(cache.rstd, {n}, x.dtype());
  dispatch_float(x.dtype(), "LayerNorm::forward", [&](auto zero) {
    using T = decltype(zero);
    layernorm_forward<T>(cache.y.data<T>(), cache.mean.data<T>(), cache.rstd.data<T>(), x.data<T>(),
                         weight_.value.data<T>(), bias_.value.data<T>(), n, channels_);
  });
  return cache.y;
}

const Tensor& LayerNorm::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype());
  const std::int64_t n = dy.numel() / channels_;
  dispatch_float(dy.dtype(), "LayerNorm::backward", [&](auto zero) {
    using T = decltype(zero);
    layernorm_backward<T>(cache.dx.data<T>(), weight_.grad.data<T>(), bias_.grad.data<T>(), dy.data<T>(),
                          cache.x.data<T>(), weight_.value.data<T>(), cache.mean.data<T>(),
                          cache.rstd.data<T>(), n, channels_);
  });
  notify(grad_ready, bias_);
  notify(grad_ready, weight_);
  return cache.dx;
}

// ---------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// CausalSelfAttention
// ---------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t channels, std::int64_t heads,
                                         DType dtype, Rng& rng, double init_std, double proj_std)
    : Layer(name),
      channels_(channels),
      heads_(heads),
      qkv_(name + ".qkv", channels, 3 * channels, dtype, rng, init_std),
      proj_(name + ".proj", channels, channels, dtype, rng, proj_std) {
  DTL_REQUIRE_ARG(heads >= 1 && channels % heads == 0, "CausalSelfAttention", "heads",
                  "is " + std::to_string(heads) + "; it must divide channels (" + std::to_string(channels) + ")");
}

std::vector<Parameter*> CausalSelfAttention::parameters() {
  std::vector<Parameter*> all = qkv_.parameters();
  for (Parameter* p : proj_.parameters()) all.push_back(p);
  return all;
}

Shape CausalSelfAttention::output_shape(const Shape& input) const {
  DTL_REQUIRE_ARG(input.size() == 3 && input[2] == channels_, (name_ + ".output_shape").c_str(), "input",
                  "is " + to_string(input) + ", expected (B, T, " + std::to_string(channels_) + ")");
  return input;
}

void CausalSelfAttention::set_slot(int slot) {
  Layer::set_slot(slot);
  qkv_.set_slot(slot);
  proj_.set_slot(slot);
}

void CausalSelfAttention::release_slot(int slot) {
  caches_.release(slot);
  qkv_.release_slot(slot);
  proj_.release_slot(slot);
}

const Tensor& CausalSelfAttention::forward(const Tensor& x) {
  require_input(x, qkv_.weight().value.dtype(), channels_, name_, "x");
  output_shape(x.shape());  // checks (B, T, C)
  const std::int64_t batch = x.dim(0), seq = x.dim(1);
  Cache& cache = caches_.at(slot_);
  cache.qkv = qkv_.forward(x);  // (B, T, 3C)
  ensure(cache.att, {batch, heads_, seq, seq}, x.dtype());
  ensure(cache.out, {batch, seq, channels_}, x.dtype());
  dispatch_float(x.dtype(), "CausalSelfAttention::forward", [&](auto zero) {
    using T = decltype(zero);
    attention_forward<T>(cache.out.data<T>(), cache.att.data<T>(), cache.qkv.data<T>(), batch, seq, channels_,
                         heads_);
  });
  return proj_.forward(cache.out);  // (B, T, C)
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  DTL_REQUIRE_ARG(cache.qkv.defined(), (name_ + ".backward").c_str(), "dy", "came before any forward in this slot");
  const std::int64_t batch = cache.qkv.dim(0), seq = cache.qkv.dim(1);
  const Tensor& dout = proj_.backward(dy, grad_ready);  // (B, T, C)
  ensure(cache.dqkv, cache.qkv.shape(), dy.dtype());
  cache.dqkv.zero();  // attention_backward accumulates
  dispatch_float(dy.dtype(), "CausalSelfAttention::backward", [&](auto zero) {
    using T = decltype(zero);
    attention_backward<T>(cache.dqkv.data<T>(), dout.data<T>(), cache.att.data<T>(), cache.qkv.data<T>(), batch,
                          seq, channels_, heads_);
  });
  return qkv_.backward(cache.dqkv, grad_ready);  // (B, T, C)
}

// ---------------------------------------------------------------------------
// Sequential and Residual
// ---------------------------------------------------------------------------

Sequential::Sequential(std::string name, std::vector<std::unique_ptr<Layer>> layers)
    : Layer(std::move(name)), layers_(std::move(layers)) {
  DTL_REQUIRE_ARG(!layers_.empty(), "Sequential", "layers", "is empty");
  for (const auto& layer : layers_) DTL_REQUIRE_ARG(layer != nullptr, "Sequential", "layers", "holds a null layer");
}

const Tensor& Sequential::forward(const Tensor& x) {
  const Tensor* h = &x;
  for (const auto& layer : layers_) h = &layer->forward(*h);
  return *h;
}

const Tensor& Sequential::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  const Tensor* g = &dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = &(*it)->backward(*g, grad_ready);
  return *g;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (const auto& layer : layers_)
    for (Parameter* p : layer->parameters()) all.push_back(p);
  return all;
}

Shape Sequential::output_shape(const Shape& input) const {
  Shape s = input;
  for (const auto& layer : layers_) s = layer->output_shape(s);
  return s;
}

void Sequential::set_slot(int slot) {
  Layer::set_slot(slot);
  for (const auto& layer : layers_) layer->set_slot(slot);
}

void Sequential::release_slot(int slot) {
  for (const auto& layer : layers_) layer->release_slot(slot);
}

Residual::Residual(std::string name, std::unique_ptr<Layer> inner)
    : Layer(std::move(name)), inner_(std::move(inner)) {
  DTL_REQUIRE_ARG(inner_ != nullptr, "Residual", "inner", "is null");
}

Shape Residual::output_shape(const Shape& input) const {
  const Shape inner = inner_->output_shape(input);
  DTL_REQUIRE_ARG(inner == input, (name_ + ".output_shape").c_str(), "input",
                  "maps to " + to_string(inner) + " inside; a residual needs the same shape as " + to_string(input));
  return input;
}

const Tensor& Residual::forward(const Tensor& x) {
  const Tensor& fx = inner_->forward(x);
  Cache& cache = caches_.at(slot_);
  ensure(cache.y, x.shape(), x.dtype());
  dispatch_float(x.dtype(), "Residual::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* a = x.data<T>();
    const T* b = fx.data<T>();
    T* y = cache.y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) y[i] = a[i] + b[i];
  });
  return cache.y;
}

const Tensor& Residual::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  const Tensor& dinner = inner_->backward(dy, grad_ready);
  ensure(cache.dx, dy.shape(), dy.dtype());
  dispatch_float(dy.dtype(), "Residual::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* a = dy.data<T>();
    const T* b = dinner.data<T>();
    T* dx = cache.dx.data<T>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) dx[i] = a[i] + b[i];  // both paths reach x
  });
  return cache.dx;
}

void Residual::set_slot(int slot) {
  Layer::set_slot(slot);
  inner_->set_slot(slot);
}

void Residual::release_slot(int slot) {
  caches_.release(slot);
  inner_->release_slot(slot);
}

std::unique_ptr<Layer> make_mlp_block(const std::string& name, std::int64_t channels, std::int64_t hidden,
                                      Activation activation, DType dtype, Rng& rng, double init_std,
                                      double proj_std) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<LayerNorm>(name + ".ln", channels, dtype));
  layers.push_back(std::make_unique<Linear>(name + ".fc", channels, hidden, dtype, rng, init_std));
  if (activation == Activation::kReLU) {
    layers.push_back(std::make_unique<ReLU>(name + ".act"));
  } else {
    layers.push_back(std::make_unique<GELU>(name + ".act"));
  }
  layers.push_back(std::make_unique<Linear>(name + ".proj", hidden, channels, dtype, rng, proj_std));
  return std::make_unique<Residual>(name, std::make_unique<Sequential>(name + ".mlp", std::move(layers)));
}

std::unique_ptr<Layer> make_attention_block(const std::string& name, std::int64_t channels, std::int64_t heads,
                                            DType dtype, Rng& rng, double init_std, double proj_std) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<LayerNorm>(name + ".ln", channels, dtype));
  layers.push_back(
      std::make_unique<CausalSelfAttention>(name + ".attn", channels, heads, dtype, rng, init_std, proj_std));
  return std::make_unique<Residual>(name, std::make_unique<Sequential>(name + ".seq", std::move(layers)));
}

// ---------------------------------------------------------------------------
// SoftmaxCrossEntropy
// ---------------------------------------------------------------------------

double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  DTL_REQUIRE_ARG(logits.defined() && logits.ndim() >= 1 && logits.device() == Device::kCpu,
                  "SoftmaxCrossEntropy::forward", "logits", "must be a CPU tensor (N..., V)");
  DTL_REQUIRE_ARG(targets.defined() && targets.dtype() == DType::kI32, "SoftmaxCrossEntropy::forward", "targets",
                  "must be an i32 tensor");
  Shape expected = logits.shape();
  expected.pop_back();
  DTL_REQUIRE_ARG(targets.shape() == expected, "SoftmaxCrossEntropy::forward", "targets",
                  "has shape " + to_string(targets.shape()) + "; logits " + to_string(logits.shape()) +
                      " need " + to_string(expected));
  const std::int64_t v = logits.dim(-1);
  const std::int64_t n = targets.numel();
  const std::int32_t* y = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    DTL_REQUIRE_ARG(y[i] >= 0 && y[i] < v, "SoftmaxCrossEntropy::forward", "targets",
                    "holds " + std::to_string(y[i]) + " at index " + std::to_string(i) + ", outside [0, " +
                        std::to_string(v) + ")");
  }
  targets_ = targets;
  ensure(probs_, logits.shape(), logits.dtype());
  double loss = 0;
  correct_ = 0;
  dispatch_float(logits.dtype(), "SoftmaxCrossEntropy::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* z = logits.data<T>();
    T* p = probs_.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      const T* zi = z + i * v;
      T* pi = p + i * v;
      std::int64_t argmax = 0;
      for (std::int64_t j = 1; j < v; ++j)
        if (zi[j] > zi[argmax]) argmax = j;
      if (argmax == y[i]) ++correct_;
      double sum = 0;
      for (std::int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(zi[j] - zi[argmax]));
      for (std::int64_t j = 0; j < v; ++j)
        pi[j] = static_cast<T>(std::exp(static_cast<double>(zi[j] - zi[argmax])) / sum);
      // -log p[y] = log(sum) - (z[y] - max): exact even where p[y] underflows.
      loss += std::log(sum) - static_cast<double>(zi[y[i]] - zi[argmax]);
    }
  });
  return n > 0 ? loss / static_cast<double>(n) : 0.0;
}

const Tensor& SoftmaxCrossEntropy::backward(double scale) {
  DTL_REQUIRE_ARG(probs_.defined() && targets_.defined(), "SoftmaxCrossEntropy::backward", "this",
                  "has no forward to go back through");
  ensure(dlogits_, probs_.shape(), probs_.dtype());
  const std::int64_t v = probs_.dim(-1);
  const std::int64_t n = targets_.numel();
  const std::int32_t* y = targets_.data<std::int32_t>();
  dispatch_float(probs_.dtype(), "SoftmaxCrossEntropy::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* p = probs_.data<T>();
    T* d = dlogits_.data<T>();
    const T s = static_cast<T>(scale / static_cast<double>(n > 0 ? n : 1));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) d[i * v + j] = (p[i * v + j] - (j == y[i] ? T(1) : T(0))) * s;
  });
  return dlogits_;
}

}  // namespace dtl::nn
