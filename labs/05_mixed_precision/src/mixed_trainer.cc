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
  // TODO(student): Set up the buffers of the class comment in lab05/mixed.h and Note [Master weights]:
  //   compute copies, master, working copy and gradients in the dtypes and MemoryCategory
  //   each is charged to (MixedMemory.* checks the bytes exactly), every rank starting from
  //   rank 0's weights, the working copy the master rounded and the compute values the
  //   working copy widened, and adamw_ over the master (handout Task C).
  throw dtl::NotImplemented("MixedPrecisionTrainer::MixedPrecisionTrainer");
}

StepResult MixedPrecisionTrainer::step(const nn::Tensor& x, const nn::Tensor& targets) {
  StepResult result;
  result.scale = scaler_->scale();
  const bool half = options_.precision != Precision::kF32;
  // TODO(student): One step exactly as the class comment of MixedPrecisionTrainer lists it, filling every
  //   field of `result` (returned below; scale is set above) (the loss averaged over ranks in
  //   fp64 with mean_over_ranks(), which takes the model's device; buckets of at most
  //   bucket_cap_bytes). A step any rank found an inf in is skipped
  //   on every rank: weights and AdamW state untouched, only the scaler updated. Master and
  //   working copy stay bit-identical on all ranks. Reach tasks A and B only through
  //   round_grads(), average_bucket() and scaler_ (see StepHooks): the grading tests put
  //   their own oracles there (handout Task C).
  throw dtl::NotImplemented("MixedPrecisionTrainer::step");
  return result;
}

}  // namespace dtl::lab05
