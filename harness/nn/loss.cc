// SoftmaxCrossEntropy: a stable softmax, the mean negative log-likelihood
// accumulated in double, and its gradient; on the CPU or (kernels/softmax_xent.cu)
// the GPU, by where the logits are.
#include "harness/nn/loss.h"

#include <cmath>

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch, ensure

namespace {

// ---------------------------------------------------------------------------
// CPU kernels, tagged OnCpu; kernels/softmax_xent.cu holds the OnCuda ones
// (Note [One dispatch point] in layer_util.h). logits, probs (N, V); targets (N).
// ---------------------------------------------------------------------------

// probs = softmax(logits) row by row; returns the summed loss and counts the
// rows whose argmax is the target into *correct. Targets are checked first.
template <typename T>
double softmax_xent_forward(OnCpu, T* p, const T* z, const std::int32_t* y, std::int64_t n, std::int64_t v,
                            std::int64_t* correct) {
  for (std::int64_t i = 0; i < n; ++i) {
    DTL_REQUIRE_ARG(y[i] >= 0 && y[i] < v, "SoftmaxCrossEntropy::forward", "targets",
                    "holds " + std::to_string(y[i]) + " at index " + std::to_string(i) + ", outside [0, " +
                        std::to_string(v) + ")");
  }
  double loss = 0;
  *correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const T* zi = z + i * v;
    T* pi = p + i * v;
    std::int64_t argmax = 0;
    for (std::int64_t j = 1; j < v; ++j)
      if (zi[j] > zi[argmax]) argmax = j;
    if (argmax == y[i]) ++*correct;
    double sum = 0;
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(zi[j] - zi[argmax]));
    for (std::int64_t j = 0; j < v; ++j) pi[j] = static_cast<T>(std::exp(static_cast<double>(zi[j] - zi[argmax])) / sum);
    // -log p[y] = log(sum) - (z[y] - max): exact even where p[y] underflows.
    loss += std::log(sum) - static_cast<double>(zi[y[i]] - zi[argmax]);
  }
  return loss;
}

// d (N, V) = (p - onehot(y)) * scale / N.
template <typename T>
void softmax_xent_backward(OnCpu, T* d, const T* p, const std::int32_t* y, double scale, std::int64_t n,
                           std::int64_t v) {
  const T s = static_cast<T>(scale / static_cast<double>(n > 0 ? n : 1));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < v; ++j) d[i * v + j] = (p[i * v + j] - (j == y[i] ? T(1) : T(0))) * s;
}

}  // namespace

double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  DTL_REQUIRE_ARG(logits.defined() && logits.ndim() >= 1, "SoftmaxCrossEntropy::forward", "logits",
                  "must be a tensor (N..., V)");
  DTL_REQUIRE_ARG(targets.defined() && targets.dtype() == DType::kI32, "SoftmaxCrossEntropy::forward", "targets",
                  "must be an i32 tensor");
  Shape expected = logits.shape();
  expected.pop_back();
  DTL_REQUIRE_ARG(targets.shape() == expected, "SoftmaxCrossEntropy::forward", "targets",
                  "has shape " + to_string(targets.shape()) + "; logits " + to_string(logits.shape()) +
                      " need " + to_string(expected));
  const std::int64_t v = logits.dim(-1);
  const std::int64_t n = targets.numel();
  targets_ = targets;
  ensure(probs_, logits.shape(), logits.dtype(), logits.device());
  double loss = 0;
  correct_ = 0;
  dispatch("SoftmaxCrossEntropy::forward", {{"logits", logits}, {"targets", targets}}, logits.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             loss = softmax_xent_forward(on, probs_.data<T>(), logits.data<T>(), targets.data<std::int32_t>(), n, v,
                                         &correct_);
           });
  return n > 0 ? loss / static_cast<double>(n) : 0.0;
}

const Tensor& SoftmaxCrossEntropy::backward(double scale) {
  DTL_REQUIRE_ARG(probs_.defined() && targets_.defined(), "SoftmaxCrossEntropy::backward", "this",
                  "has no forward to go back through");
  ensure(dlogits_, probs_.shape(), probs_.dtype(), probs_.device());
  const std::int64_t v = probs_.dim(-1);
  const std::int64_t n = targets_.numel();
  dispatch("SoftmaxCrossEntropy::backward", {{"probs", probs_}, {"targets", targets_}}, probs_.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             softmax_xent_backward(on, dlogits_.data<T>(), probs_.data<T>(), targets_.data<std::int32_t>(), scale, n,
                                   v);
           });
  return dlogits_;
}

}  // namespace dtl::nn
