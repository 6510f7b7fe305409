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

namespace dtl::lab05 {

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

namespace {

// The trainer's scaler: the hook's (the grading tests' oracle), or the LossScaler of task B.
std::unique_ptr<LossScaler> make_scaler(const MixedOptions& options) {
  if (!options.hooks.make_scaler) return std::make_unique<LossScaler>(options.scaler);
  std::unique_ptr<LossScaler> scaler = options.hooks.make_scaler(options.scaler);
  DTL_REQUIRE_ARG(scaler != nullptr, "MixedPrecisionTrainer", "options.hooks.make_scaler", "returned null");
  return scaler;
}

}  // namespace

// The two doors to tasks A and B (See StepHooks in lab05/mixed.h). Given: the
// grading tests of task C put their own oracles behind them.
RoundStats MixedPrecisionTrainer::round_grads() {
  return options_.hooks.round ? options_.hooks.round(grads_, compute_grads_) : round_to_half(grads_, compute_grads_);
}

void MixedPrecisionTrainer::average_bucket(std::size_t offset, std::size_t count) {
  const DType dtype = grads_.dtype();
  void* slice = static_cast<char*>(grads_.raw()) + offset * dtl::dtype_size(grads_.dtype());
  if (options_.precision == Precision::kF32) {
    comm_.allreduce(slice, count, dtype, ReduceOp::kAvg).wait();
  } else if (options_.hooks.average) {
    options_.hooks.average(comm_, slice, count, dtype, options_.divide);
  } else {
    allreduce_mean_half(comm_, slice, count, dtype, options_.divide);
  }
}

MixedPrecisionTrainer::MixedPrecisionTrainer(Communicator& comm, nn::Model& model, MixedOptions options)
    : comm_(comm), model_(model), options_(std::move(options)), scaler_(make_scaler(options_)) {
  DTL_REQUIRE_ARG(model.dtype() == nn::DType::kF32, "MixedPrecisionTrainer", "model",
                  std::string("computes in ") + dtype_name(model.dtype()) + "; build it in f32");
  DTL_REQUIRE_ARG(!model.flat_values().defined() && !model.flat_grads().defined(), "MixedPrecisionTrainer",
                  "model", "is already flattened; the trainer lays out its buffers itself");
  DTL_REQUIRE_ARG(model.parameter_count() > 0, "MixedPrecisionTrainer", "model", "has no parameters");
  DTL_REQUIRE_ARG(options_.bucket_cap_bytes > 0, "MixedPrecisionTrainer", "options.bucket_cap_bytes", "is 0");
  const std::vector<nn::Parameter*> params = model_.parameters();
  const bool half = options_.precision != Precision::kF32;
  // TODO(student): Flatten the model (nn::flatten_values / nn::flatten_grads): into kOther when half
  //   (the compute copies), into kParameters / kGradients for fp32. Broadcast rank 0's
  //   flat values (comm_.broadcast(..., 0).wait()). fp32: master_, working_ and grads_
  //   are the flat values/grads themselves. Half: master_ = a clone of the values in
  //   kOptimizerState; working_ (kParameters) and grads_ (kGradients) new 1-D tensors of
  //   precision_dtype(); working_ = round(master_), compute values = widen(working_)
  //   (nn::convert both). Then adamw_ over parameter_count() elements.
  throw dtl::NotImplemented("MixedPrecisionTrainer::MixedPrecisionTrainer");
}

StepResult MixedPrecisionTrainer::step(const nn::Tensor& x, const nn::Tensor& targets) {
  StepResult result;
  result.scale = scaler_->scale();
  const bool half = options_.precision != Precision::kF32;
  // TODO(student): 1. zero_grad, forward, the loss (loss_.forward); result.loss = its mean over the
  //      ranks (a double allreduced with ReduceOp::kAvg).
  //   2. backward of the scaled loss: model_.backward(loss_.backward(result.scale)).
  //   3. result.rounding = round_grads() (grads_ = round16(compute_grads_)).
  //   4. Average grads_ in buckets of at most bucket_cap_bytes (consecutive slices of the
  //      flat buffer): average_bucket(offset, count) for each. Count result.buckets,
  //      comm_bytes, comm_seconds (clock_seconds()).
  //   5. found = scaler_->unscale_and_check(comm_, grads_, compute_grads_); result.skipped = found.
  //   6. Not found: adamw_->step(master, compute grads); half: working_ = round(master_),
  //      compute values = widen(working_). Then scaler_->update(found) either way.
  //   Reach tasks A and B only through round_grads(), average_bucket() and scaler_
  //   (See StepHooks): the grading tests put their own oracles there.
  throw dtl::NotImplemented("MixedPrecisionTrainer::step");
  return result;
}

}  // namespace dtl::lab05
