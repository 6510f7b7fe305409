// Lab 05, given (not a task; compiled into both builds): what your files in src/
// lean on. The names of the options, the LossScaler's argument checks, the
// trainer's scaler, and the two doors of a step to tasks A and B
// (round_grads(), average_bucket(); See StepHooks in lab05/mixed.h): the grading
// tests of task C put their own oracles behind them.
#include "mixed_setup.h"

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>

#include "harness/error.h"
#include "lab05/mixed.h"

namespace dtl::lab05 {

std::unique_ptr<LossScaler> make_scaler(const MixedOptions& options) {
  if (!options.hooks.make_scaler) return std::make_unique<LossScaler>(options.scaler);
  std::unique_ptr<LossScaler> scaler = options.hooks.make_scaler(options.scaler);
  DTL_REQUIRE_ARG(scaler != nullptr, "MixedPrecisionTrainer", "options.hooks.make_scaler", "returned null");
  return scaler;
}

const char* divide_placement_name(DividePlacement placement) {
  return placement == DividePlacement::kPre ? "pre-divide" : "post-divide";
}

const char* scaling_mode_name(ScalingMode mode) {
  switch (mode) {
    case ScalingMode::kNone: return "none";
    case ScalingMode::kStatic: return "static";
    case ScalingMode::kDynamic: return "dynamic";
  }
  return "?";
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  DTL_REQUIRE_ARG(std::isfinite(options.init_scale) && options.init_scale > 0.0f, "LossScaler", "init_scale",
                  "is " + std::to_string(options.init_scale) + ", must be finite and > 0");
  DTL_REQUIRE_ARG(options.growth_factor > 1.0f && std::isfinite(options.growth_factor), "LossScaler",
                  "growth_factor", "is " + std::to_string(options.growth_factor) + ", must be > 1");
  DTL_REQUIRE_ARG(options.backoff_factor > 0.0f && options.backoff_factor < 1.0f, "LossScaler", "backoff_factor",
                  "is " + std::to_string(options.backoff_factor) + ", must be in (0, 1)");
  DTL_REQUIRE_ARG(options.growth_interval >= 1, "LossScaler", "growth_interval",
                  "is " + std::to_string(options.growth_interval) + ", must be >= 1");
  scale_ = options.mode == ScalingMode::kNone ? 1.0f : options.init_scale;
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kF32: return "fp32";
    case Precision::kF16: return "fp16";
    case Precision::kBF16: return "bf16";
  }
  return "?";
}

nn::DType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::kF16: return nn::DType::kF16;
    case Precision::kBF16: return nn::DType::kBF16;
    case Precision::kF32: break;
  }
  return nn::DType::kF32;
}

// The two doors to tasks A and B (See StepHooks in lab05/mixed.h). Given: the
// grading tests of task C put their own oracles behind them.
RoundStats MixedPrecisionTrainer::round_grads() {
  return options_.hooks.round ? options_.hooks.round(grads_, compute_grads_) : round_to_half(grads_, compute_grads_);
}

void MixedPrecisionTrainer::average_bucket(std::size_t offset, std::size_t count) {
  const DType dtype = grads_.dtype();
  void* slice = static_cast<char*>(grads_.raw()) + offset * dtl::dtype_size(grads_.dtype());
  if (options_.precision == Precision::kF32) {
    backend_.allreduce(slice, count, dtype, ReduceOp::kAvg).wait();
  } else if (options_.hooks.average) {
    options_.hooks.average(backend_, slice, count, dtype, options_.divide);
  } else {
    allreduce_mean_half(backend_, slice, count, dtype, options_.divide);
  }
}

}  // namespace dtl::lab05
