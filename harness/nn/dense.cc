// Linear, ReLU and GELU: forward and backward.
// Written out as loops over raw pointers (llm.c style). Each CPU kernel is a
// template over the element type T (float for training, double for the
// gradient checks) whose first argument is the tag OnCpu; the CUDA kernels of
// the same names take OnCuda (kernels/kernels.h). The layer methods check
// shapes and call dispatch(), which picks one by device and dtype (Note [One
// dispatch point] in layer_util.h).
#include "harness/nn/dense.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "harness/nn/gemm.h"
#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch_float, require_input, ensure, notify, ...

namespace {

// ---------------------------------------------------------------------------
// Kernels. N rows; each function says the shape of every pointer.
// ---------------------------------------------------------------------------

// y (N, out) = x (N, in) W^T (W is (out, in)) + b (out). The bias goes in
// first, row by row, and the GEMM accumulates onto it (beta = 1): one pass
// over y instead of a second loop after the GEMM.
template <typename T>
void linear_forward(OnCpu, T* y, const T* x, const T* w, const T* b, std::int64_t n, std::int64_t in, std::int64_t out) {
  if (b != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) std::memcpy(y + i * out, b, static_cast<std::size_t>(out) * sizeof(T));
  }
  gemm(false, true, n, out, in, T(1), x, in, w, in, b != nullptr ? T(1) : T(0), y, out);
}

// db (out) += sum_n dy (N, out). __restrict__: db and dy never overlap, which
// lets the compiler vectorize the inner loop.
template <typename T>
void linear_backward_bias(OnCpu, T* __restrict__ db, const T* __restrict__ dy, std::int64_t n, std::int64_t out) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < out; ++o) db[o] += dy[i * out + o];
}

// dW (out, in) += dy^T (out, N) x (N, in);  dx (N, in) = dy (N, out) W (out, in).
template <typename T>
void linear_backward_weight(OnCpu, T* dw, const T* dy, const T* x, std::int64_t n, std::int64_t in, std::int64_t out) {
  gemm(true, false, out, in, n, T(1), dy, out, x, in, T(1), dw, in);
}
template <typename T>
void linear_backward_input(OnCpu, T* dx, const T* dy, const T* w, std::int64_t n, std::int64_t in, std::int64_t out) {
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

template <typename T>
void relu_forward(OnCpu, T* y, const T* x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}
template <typename T>
void relu_backward(OnCpu, T* dx, const T* x, const T* dy, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}
template <typename T>
void gelu_forward(OnCpu, T* y, const T* x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) y[i] = gelu(x[i]);
}
template <typename T>
void gelu_backward(OnCpu, T* dx, const T* x, const T* dy, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dx[i] = gelu_grad(x[i]) * dy[i];
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
  ensure(cache.y, output_shape(x.shape()), x.dtype(), x.device());
  const std::int64_t n = x.numel() / in_;
  dispatch("Linear::forward", {{"x", x}, {"weight", weight_.value}, {"bias", bias_.value}}, x.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             const bool add_bias = has_bias_ && !(bias_to_gelu_ && fuses_bias_gelu(decltype(on){}));
             linear_forward(on, cache.y.data<T>(), x.data<T>(), weight_.value.data<T>(),
                            add_bias ? bias_.value.data<T>() : nullptr, n, in_, out_);
           });
  return cache.y;
}

const Tensor& Linear::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  // The bias and weight gradients are final before dx is computed: announce
  // them at once, so a bucket can start its allreduce while dx is computed.
  // (On the GPU "final" means queued on the compute stream: see Note
  // [The compute stream] in compute_stream.h.)
  add_weight_grads(cache.x, dy, grad_ready);
  return input_grad(cache, dy);
}

// B and W (Note [Split backward]): the fused backward's two halves, the same
// calls on the same tensors; dy waits in the slot for W.
const Tensor& Linear::backward_input(const Tensor& dy) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  DTL_REQUIRE_ARG(!cache.dy.defined(), (name_ + ".backward_input").c_str(), "dy",
                  "slot " + std::to_string(slot_) + " already ran backward_input() and waits for its backward_weight()");
  cache.dy = dy;  // a handle, as x is: W reads both
  return input_grad(cache, dy);
}

void Linear::backward_weight(const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  DTL_REQUIRE_ARG(cache.dy.defined(), (name_ + ".backward_weight").c_str(), "slot",
                  "is " + std::to_string(slot_) + ", which has no backward_input() waiting for its W");
  add_weight_grads(cache.x, cache.dy, grad_ready);
  cache.dy = Tensor();
}

// db += sum_n dy; dW += dy^T x; announced bias first, then weight.
void Linear::add_weight_grads(const Tensor& x, const Tensor& dy, const GradReadyFn& grad_ready) {
  const std::int64_t n = dy.numel() / out_;
  dispatch("Linear::backward", {{"dy", dy}, {"weight.grad", weight_.grad}}, dy.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    // A bias fused into the next GELU got its gradient there, already queued.
    if (has_bias_) {
      if (!(bias_to_gelu_ && fuses_bias_gelu(decltype(on){}))) {
        linear_backward_bias(on, bias_.grad.data<T>(), dy.data<T>(), n, out_);
      }
      notify(grad_ready, bias_);
    }
    linear_backward_weight(on, weight_.grad.data<T>(), dy.data<T>(), x.data<T>(), n, in_, out_);
    notify(grad_ready, weight_);
  });
}

// dx = dy W, into the slot's dx.
const Tensor& Linear::input_grad(Cache& cache, const Tensor& dy) {
  ensure(cache.dx, cache.x.shape(), dy.dtype(), dy.device());
  const std::int64_t n = dy.numel() / out_;
  dispatch("Linear::backward", {{"dy", dy}, {"weight", weight_.value}}, dy.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    linear_backward_input(on, cache.dx.data<T>(), dy.data<T>(), weight_.value.data<T>(), n, in_, out_);
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
  ensure(cache.y, x.shape(), x.dtype(), x.device());
  dispatch("ReLU::forward", {{"x", x}}, x.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    relu_forward(on, cache.y.data<T>(), x.data<T>(), x.numel());
  });
  return cache.y;
}

const Tensor& ReLU::backward(const Tensor& dy, const GradReadyFn& /*grad_ready*/) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype(), dy.device());
  dispatch("ReLU::backward", {{"dy", dy}, {"x", cache.x}}, dy.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    relu_backward(on, cache.dx.data<T>(), cache.x.data<T>(), dy.data<T>(), dy.numel());
  });
  return cache.dx;
}

void GELU::fuse_bias_of(Linear& linear) {
  DTL_REQUIRE_ARG(linear.has_bias_, (name_ + ".fuse_bias_of").c_str(), "linear",
                  "'" + linear.name() + "' has no bias to fuse");
  linear.bias_to_gelu_ = true;
  bias_ = &linear.bias_;
}

// With a fused bias (on the GPU only: fuses_bias_gelu), x is the Linear's x W^T and
// the bias is added here; see Note [Fused bias + GELU] in kernels/bias_gelu.cu.
const Tensor& GELU::forward(const Tensor& x) {
  require_input(x, x.dtype(), -1, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;
  ensure(cache.y, x.shape(), x.dtype(), x.device());
  const Tensor bias = bias_ != nullptr ? bias_->value : Tensor();
  dispatch("GELU::forward", {{"x", x}, {"bias", bias}}, x.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    if constexpr (fuses_bias_gelu(decltype(on){})) {
      if (bias_ != nullptr) {
        const std::int64_t cols = bias.numel();
        DTL_REQUIRE_ARG(x.dim(-1) == cols, (name_ + ".forward").c_str(), "x",
                        "is " + to_string(x.shape()) + ", but the fused bias has " + std::to_string(cols));
        bias_gelu_forward(on, cache.y.data<T>(), x.data<T>(), bias.data<T>(), x.numel() / cols, cols);
        return;
      }
    }
    gelu_forward(on, cache.y.data<T>(), x.data<T>(), x.numel());
  });
  return cache.y;
}

const Tensor& GELU::backward(const Tensor& dy, const GradReadyFn& /*grad_ready*/) {
  Cache& cache = caches_.at(slot_);
  require_grad(dy, cache.y, name_);
  ensure(cache.dx, dy.shape(), dy.dtype(), dy.device());
  const Tensor bias = bias_ != nullptr ? bias_->value : Tensor();
  const Tensor bias_grad = bias_ != nullptr ? bias_->grad : Tensor();
  dispatch("GELU::backward", {{"dy", dy}, {"x", cache.x}, {"bias", bias}, {"bias.grad", bias_grad}}, dy.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             if constexpr (fuses_bias_gelu(decltype(on){})) {
               if (bias_ != nullptr) {
                 const std::int64_t cols = bias.numel();
                 bias_gelu_backward(on, cache.dx.data<T>(), bias_grad.data<T>(), cache.x.data<T>(), bias.data<T>(),
                                    dy.data<T>(), dy.numel() / cols, cols);
                 return;
               }
             }
             gelu_backward(on, cache.dx.data<T>(), cache.x.data<T>(), dy.data<T>(), dy.numel());
           });
  return cache.dx;
}

}  // namespace dtl::nn
