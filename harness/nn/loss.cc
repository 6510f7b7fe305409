// SoftmaxCrossEntropy: a stable softmax, the mean negative log-likelihood
// accumulated in double, and its gradient.
#include "harness/nn/loss.h"

#include <cmath>

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch_float, ensure

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
