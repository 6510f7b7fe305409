// The optimizer steps: one loop each, element by element.
#include "harness/nn/optim.h"

#include <cmath>
#include <string>

#include "harness/error.h"

namespace dtl::nn {

namespace {

void require_slice(std::size_t params, std::size_t grads, std::int64_t count, const char* function) {
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(params) == count, function, "params",
                  "has " + std::to_string(params) + " elements; the optimizer was made for " + std::to_string(count));
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(grads) == count, function, "grads",
                  "has " + std::to_string(grads) + " elements; the optimizer was made for " + std::to_string(count));
}

}  // namespace

Sgd::Sgd(SgdOptions options, std::int64_t count, Device device) : options_(options), count_(count) {
  DTL_REQUIRE_ARG(count >= 0, "Sgd", "count", "is negative");
  DTL_REQUIRE_ARG(is_host(device), "Sgd", "device", "is cuda; the optimizers step in host memory");
  DTL_REQUIRE_ARG(options.lr >= 0, "Sgd", "options.lr", "is negative");
  DTL_REQUIRE_ARG(options.momentum >= 0, "Sgd", "options.momentum", "is negative");
  DTL_REQUIRE_ARG(options.weight_decay >= 0, "Sgd", "options.weight_decay", "is negative");
  if (options.momentum > 0) momentum_ = Tensor::zeros({count}, DType::kF32, MemoryCategory::kOptimizerState, device);
}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  require_slice(params.size(), grads.size(), count_, "Sgd::step");
  const float lr = options_.lr, mu = options_.momentum, wd = options_.weight_decay;
  float* m = momentum_.defined() ? momentum_.data<float>() : nullptr;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i] + wd * params[i];
    if (m != nullptr) {
      m[i] = mu * m[i] + g;  // starts at 0, so step 1 gives m = g, as in PyTorch
      params[i] -= lr * m[i];
    } else {
      params[i] -= lr * g;
    }
  }
}

AdamW::AdamW(AdamWOptions options, std::int64_t count, Device device) : options_(options), count_(count) {
  DTL_REQUIRE_ARG(count >= 0, "AdamW", "count", "is negative");
  DTL_REQUIRE_ARG(is_host(device), "AdamW", "device", "is cuda; the optimizers step in host memory");
  DTL_REQUIRE_ARG(options.lr >= 0, "AdamW", "options.lr", "is negative");
  DTL_REQUIRE_ARG(options.beta1 >= 0 && options.beta1 < 1, "AdamW", "options.beta1", "must be in [0, 1)");
  DTL_REQUIRE_ARG(options.beta2 >= 0 && options.beta2 < 1, "AdamW", "options.beta2", "must be in [0, 1)");
  DTL_REQUIRE_ARG(options.eps > 0, "AdamW", "options.eps", "must be positive");
  DTL_REQUIRE_ARG(options.weight_decay >= 0, "AdamW", "options.weight_decay", "is negative");
  m_ = Tensor::zeros({count}, DType::kF32, MemoryCategory::kOptimizerState, device);
  v_ = Tensor::zeros({count}, DType::kF32, MemoryCategory::kOptimizerState, device);
}

void AdamW::set_steps(std::int64_t steps) {
  DTL_REQUIRE_ARG(steps >= 0, "AdamW::set_steps", "steps", "is negative (" + std::to_string(steps) + ")");
  t_ = steps;
}

void AdamW::step(std::span<float> params, std::span<const float> grads) {
  require_slice(params.size(), grads.size(), count_, "AdamW::step");
  ++t_;
  const AdamWOptions& o = options_;
  // Bias corrections, the same on every rank and every slice: computed once
  // per step in double, then used as floats.
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t_)));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(t_)));
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i];
    params[i] -= o.lr * o.weight_decay * params[i];  // decoupled weight decay
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g * g;
    const float m_hat = m[i] / correction1;
    const float v_hat = v[i] / correction2;
    params[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
  }
}

}  // namespace dtl::nn
