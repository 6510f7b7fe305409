// Lab 05, task C: the mixed-precision data-parallel step.
//
// What this file teaches: where each copy of the weights lives and which
// precision every number has at every point of a step. For fp16 with AdamW, per
// parameter (See Note [Master weights] and Note [Compute copies] in lab05/mixed.h):
//
//     master      fp32  kOptimizerState  4 B   the optimizer's weights, updated in fp32
//     m, v        fp32  kOptimizerState  8 B   AdamW's moments
//     working     fp16  kParameters      2 B   round(master), what forward uses
//     grads       fp16  kGradients       2 B   round(S * dL/dw), what is allreduced
//     compute     fp32  kOther           8 B   widen(working) and backward's output (CPU stand-in for registers)
//
// One step, and the precision of each arrow:
//
//     working --widen--> compute values --forward/backward (f32, loss x S)--> compute grads
//     compute grads --round16--> grads --allreduce (fp32 adds, 16-bit stores)--> grads
//     grads --widen, x 1/S (fp32)--> compute grads --AdamW (fp32)--> master --round16--> working
//
// A skipped step (some rank saw inf/NaN) stops after the unscale: master, working
// and AdamW's state keep every bit, on every rank, and only the scale moves.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "lab05/mixed.h"
#include "mixed_device.h"
#include "mixed_setup.h"

namespace dtl::lab05 {

MixedPrecisionTrainer::MixedPrecisionTrainer(Communicator& backend, nn::Model& model, MixedOptions options)
    : backend_(backend), model_(model), options_(std::move(options)), scaler_(make_scaler(options_)) {
  DTL_REQUIRE_ARG(model.dtype() == nn::DType::kF32, "MixedPrecisionTrainer", "model",
                  std::string("computes in ") + dtype_name(model.dtype()) + "; build it in f32");
  DTL_REQUIRE_ARG(!model.flat_values().defined() && !model.flat_grads().defined(), "MixedPrecisionTrainer",
                  "model", "is already flattened; the trainer lays out its buffers itself");
  DTL_REQUIRE_ARG(model.parameter_count() > 0, "MixedPrecisionTrainer", "model", "has no parameters");
  DTL_REQUIRE_ARG(options_.bucket_cap_bytes > 0, "MixedPrecisionTrainer", "options.bucket_cap_bytes", "is 0");
  const std::vector<nn::Parameter*> params = model_.parameters();
  const bool half = options_.precision != Precision::kF32;
  // BEGIN SOLUTION(MixedPrecisionTrainer::MixedPrecisionTrainer)
  // | Set up the buffers of the class comment in lab05/mixed.h and Note [Master weights]:
  // | compute copies, master, working copy and gradients in the dtypes and MemoryCategory
  // | each is charged to (MixedMemory.* checks the bytes exactly), every rank starting from
  // | rank 0's weights, the working copy the master rounded and the compute values the
  // | working copy widened, and adamw_ over the master (handout Task C).
  compute_values_ = nn::flatten_values(params, 1, half ? nn::MemoryCategory::kOther : nn::MemoryCategory::kParameters);
  compute_grads_ = nn::flatten_grads(params, 1, half ? nn::MemoryCategory::kOther : nn::MemoryCategory::kGradients);
  const nn::Device device = compute_values_.device();  // where the model lives: every copy goes there too
  backend_.broadcast(compute_values_.raw(), static_cast<std::size_t>(compute_values_.numel()), DType::kF32, 0).wait();
  if (!half) {
    master_ = compute_values_;
    working_ = compute_values_;
    grads_ = compute_grads_;
  } else {
    const std::int64_t n = compute_values_.numel();
    master_ = compute_values_.clone(nn::MemoryCategory::kOptimizerState);
    working_ = nn::Tensor::zeros({n}, precision_dtype(options_.precision), nn::MemoryCategory::kParameters, device);
    grads_ = nn::Tensor::zeros({n}, precision_dtype(options_.precision), nn::MemoryCategory::kGradients, device);
    nn::convert(working_, master_);
    nn::convert(compute_values_, working_);
  }
  adamw_ = std::make_unique<nn::AdamW>(options_.adamw, model_.parameter_count(), device);
  // END SOLUTION
}

StepResult MixedPrecisionTrainer::step(const nn::Tensor& x, const nn::Tensor& targets) {
  StepResult result;
  result.scale = scaler_->scale();
  const bool half = options_.precision != Precision::kF32;
  // BEGIN SOLUTION(MixedPrecisionTrainer::step)
  // | One step exactly as the class comment of MixedPrecisionTrainer lists it, filling every
  // | field of `result` (returned below; scale is set above) (the loss averaged over ranks in
  // | fp64 with mean_over_ranks(), which takes the model's device; buckets of at most
  // | bucket_cap_bytes). A step any rank found an inf in is skipped
  // | on every rank: weights and AdamW state untouched, only the scaler updated. Master and
  // | working copy stay bit-identical on all ranks. Reach tasks A and B only through
  // | round_grads(), average_bucket() and scaler_ (see StepHooks): the grading tests put
  // | their own oracles there (handout Task C).
  model_.zero_grad();
  const double loss = loss_.forward(model_.forward(x), targets);
  result.loss = mean_over_ranks(backend_, loss, master_.device());
  model_.backward(loss_.backward(result.scale));
  result.rounding = round_grads();

  const double begin = clock_seconds();
  const auto n = static_cast<std::size_t>(grads_.numel());
  const std::size_t element = dtl::dtype_size(grads_.dtype());
  const std::size_t per_bucket = std::max<std::size_t>(1, options_.bucket_cap_bytes / element);
  for (std::size_t offset = 0; offset < n; offset += per_bucket) {
    const std::size_t count = std::min(per_bucket, n - offset);
    average_bucket(offset, count);
    result.comm_bytes += static_cast<std::int64_t>(count * element);
    ++result.buckets;
  }
  result.comm_seconds = clock_seconds() - begin;

  const bool found = scaler_->unscale_and_check(backend_, grads_, compute_grads_);
  result.skipped = found;
  if (!found) {
    adamw_->step(master_, compute_grads_);  // where they live: a loop on the CPU, one kernel on the GPU
    if (half) {
      nn::convert(working_, master_);
      nn::convert(compute_values_, working_);
    }
  }
  scaler_->update(found);
  // END SOLUTION
  return result;
}

}  // namespace dtl::lab05
