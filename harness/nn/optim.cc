// The optimizer steps: one loop each, element by element, on the CPU; the
// same steps on the GPU are kernels/optim.cu, picked by dispatch() (Note [One
// dispatch point] in layer_util.h) when the tensors live there.
#include "harness/nn/optim.h"

#include <cmath>
#include <string>

#include "harness/error.h"
#include "harness/nn/kernels/optim_math.cuh"  // AdamWStep
#include "harness/nn/layer_util.h"

namespace dtl::nn {

using detail::OnCpu;

namespace {

// The CPU steps over count elements (the OnCuda ones are in kernels/optim.cu).
void sgd_step(OnCpu, float* params, const float* grads, float* m, std::int64_t count, float lr, float mu, float wd) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = grads[i] + wd * params[i];
    if (m != nullptr) {
      m[i] = mu * m[i] + g;  // starts at 0, so step 1 gives m = g, as in PyTorch
      params[i] -= lr * m[i];
    } else {
      params[i] -= lr * g;
    }
  }
}

void adamw_step(OnCpu, float* params, const float* grads, float* m, float* v, std::int64_t count,
                const kernels::AdamWStep& o) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = grads[i];
    params[i] -= o.lr * o.weight_decay * params[i];  // decoupled weight decay
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g * g;
    const float m_hat = m[i] / o.correction1;
    const float v_hat = v[i] / o.correction2;
    params[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
  }
}

// A Tensor step's arguments: f32, `count` elements each.
void require_tensors(const Tensor& params, const Tensor& grads, std::int64_t count, const char* function) {
  DTL_REQUIRE_ARG(params.defined() && params.dtype() == DType::kF32, function, "params", "must be an f32 tensor");
  DTL_REQUIRE_ARG(grads.defined() && grads.dtype() == DType::kF32, function, "grads", "must be an f32 tensor");
  DTL_REQUIRE_ARG(params.numel() == count, function, "params",
                  "has " + std::to_string(params.numel()) + " elements; the optimizer was made for " +
                      std::to_string(count));
  DTL_REQUIRE_ARG(grads.numel() == count, function, "grads",
                  "has " + std::to_string(grads.numel()) + " elements; the optimizer was made for " +
                      std::to_string(count));
}

void require_host_state(const Tensor& state, const char* function) {
  DTL_REQUIRE_ARG(!state.defined() || is_host(state.device()), function, "params",
                  "is a host span, but the optimizer's state is on the GPU: call step(Tensor, Tensor)");
}

void require_slice(std::size_t params, std::size_t grads, std::int64_t count, const char* function) {
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(params) == count, function, "params",
                  "has " + std::to_string(params) + " elements; the optimizer was made for " + std::to_string(count));
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(grads) == count, function, "grads",
                  "has " + std::to_string(grads) + " elements; the optimizer was made for " + std::to_string(count));
}

}  // namespace

Sgd::Sgd(SgdOptions options, std::int64_t count, Device device) : options_(options), count_(count) {
  DTL_REQUIRE_ARG(count >= 0, "Sgd", "count", "is negative");
  DTL_REQUIRE_ARG(options.lr >= 0, "Sgd", "options.lr", "is negative");
  DTL_REQUIRE_ARG(options.momentum >= 0, "Sgd", "options.momentum", "is negative");
  DTL_REQUIRE_ARG(options.weight_decay >= 0, "Sgd", "options.weight_decay", "is negative");
  if (options.momentum > 0) momentum_ = Tensor::zeros({count}, DType::kF32, MemoryCategory::kOptimizerState, device);
}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  require_slice(params.size(), grads.size(), count_, "Sgd::step");
  require_host_state(momentum_, "Sgd::step");
  sgd_step(OnCpu{}, params.data(), grads.data(), momentum_.defined() ? momentum_.data<float>() : nullptr, count_,
           options_.lr, options_.momentum, options_.weight_decay);
}

void Sgd::step(const Tensor& params, const Tensor& grads) {
  require_tensors(params, grads, count_, "Sgd::step");
  detail::dispatch("Sgd::step", {{"params", params}, {"grads", grads}, {"momentum", momentum_}}, DType::kF32,
                   [&](auto on, auto /*float*/) {
                     sgd_step(on, params.data<float>(), grads.data<float>(),
                              momentum_.defined() ? momentum_.data<float>() : nullptr, count_, options_.lr,
                              options_.momentum, options_.weight_decay);
                   });
}

AdamW::AdamW(AdamWOptions options, std::int64_t count, Device device) : options_(options), count_(count) {
  DTL_REQUIRE_ARG(count >= 0, "AdamW", "count", "is negative");
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

kernels::AdamWStep AdamW::next_step() {
  ++t_;
  const AdamWOptions& o = options_;
  // Bias corrections, the same on every rank and every slice: computed once
  // per step in double, then used as floats.
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t_)));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(t_)));
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, correction1, correction2};
}

void AdamW::step(std::span<float> params, std::span<const float> grads) {
  require_slice(params.size(), grads.size(), count_, "AdamW::step");
  require_host_state(m_, "AdamW::step");
  adamw_step(OnCpu{}, params.data(), grads.data(), m_.data<float>(), v_.data<float>(), count_, next_step());
}

void AdamW::step(const Tensor& params, const Tensor& grads) {
  require_tensors(params, grads, count_, "AdamW::step");
  detail::common_device("AdamW::step", {{"params", params}, {"grads", grads}, {"m", m_}});  // before t advances
  const kernels::AdamWStep s = next_step();
  detail::dispatch("AdamW::step", {{"params", params}, {"grads", grads}, {"m", m_}}, DType::kF32,
                   [&](auto on, auto /*float*/) {
                     adamw_step(on, params.data<float>(), grads.data<float>(), m_.data<float>(), v_.data<float>(),
                                count_, s);
                   });
}

}  // namespace dtl::nn
