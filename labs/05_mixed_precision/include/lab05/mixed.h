/// @file
/// @brief Lab 05 — mixed-precision data-parallel training: the API you implement in src/.
///
/// Mixed precision keeps two copies of every weight: an fp32 **master** copy
/// that the optimizer updates, and a 16-bit **working** copy (fp16 or bf16) that
/// forward and backward use. Gradients come out in 16 bits, are averaged across
/// ranks in 16 bits (half the bytes on the wire), and are turned back into fp32
/// for the optimizer. fp16's small range makes small gradients underflow to zero
/// and large ones overflow to infinity, so fp16 needs **loss scaling**; bf16 has
/// fp32's range and does not. This lab builds, on the training core (harness/nn)
/// and the Communicator interface (harness/comm):
///
///   - Task A (half_reduce.cc): the reduction of 16-bit gradients with the sum
///     taken in fp32 and stored in 16 bits (reduce_half_sum()), and where the
///     divide by the world size goes (allreduce_mean_half(), DividePlacement);
///   - Task B (loss_scaler.cc): rounding scaled gradients to 16 bits and counting
///     what underflowed or overflowed (round_to_half()), and the dynamic loss
///     scaler (LossScaler): unscale in fp32, agree on inf/NaN across all ranks,
///     skip the step and back off, grow after a run of clean steps;
///   - Task C (mixed_trainer.cc): the mixed-precision DDP step over a model
///     (MixedPrecisionTrainer): master weights, working copy, scaled backward,
///     16-bit bucketed gradient averaging, unscale, skip or step;
///   - Task D (powersgd.cc, its own header lab05/powersgd.h): PowerSGD, rank-r
///     compression with error feedback, as a StepHooks::average.
///
/// and, given (labs/05_mixed_precision/given/, compiled into both builds, not yours to edit):
///   - half_communicator.cc  HalfSumCommunicator: Open MPI with your reduce_half_sum()
///                           as a user-defined MPI reduction, and make_communicator().
///   - mixed_device.{h,cu}   the device half of your loops (Note [The GPU step]): a kernel
///                           per loop, with mixed_device_math.h's per-element arithmetic.
///
/// See Note [fp16 and bf16], Note [Loss scaling], Note [Master weights],
/// Note [Where to divide], Note [Compute copies] and Note [The GPU step] below; the
/// handout refers to them.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/nn/tensor.h"

namespace dtl::lab05 {

// Note [fp16 and bf16]
// ~~~~~~~~~~~~~~~~~~~~
// Both formats are 16 bits: a sign, an exponent and a mantissa (harness/nn/half.h).
//
//     format  exponent  mantissa  largest finite  smallest normal  smallest subnormal  spacing at 1
//     fp32        8        23       3.4e38          1.2e-38          1.4e-45             1.2e-7
//     fp16        5        10       65504           6.1e-5 (2^-14)   6.0e-8 (2^-24)      9.8e-4 (2^-10)
//     bf16        8         7       3.4e38          1.2e-38          9.2e-41             7.8e-3 (2^-7)
//
// fp16 has three more mantissa bits than bf16 (8 times finer steps) but a range
// of only 2^-24 .. 65504. Gradients of large networks reach far below 2^-24
// (Micikevicius et al., "Mixed Precision Training", 2018, plot an SSD detector's
// activation gradients, many of them under fp16's range); those round to zero in
// fp16 ("underflow"), and those just above keep few significant bits as
// subnormals. (This lab's small models sit higher: bench/RESULTS.md measures
// where.) bf16 keeps fp32's 8-bit exponent, so every gradient that is
// representable in fp32 (down to 1e-38) is representable in bf16 too, only less
// precisely: bf16 needs no loss scaling. See Note [Loss scaling].

// Note [Loss scaling]
// ~~~~~~~~~~~~~~~~~~~
// Backward is linear in the loss: the gradients of S * loss are S times the
// gradients of the loss. So multiply the loss (in practice, dL/dlogits) by a
// scale S = 2^k before backward: every gradient moves k binades up, out of fp16's
// underflow range, and the fp16 rounding happens on S * g. Afterwards divide by S
// in fp32 (unscale) before the optimizer sees the gradients: the optimizer
// computes with the true gradient, and since S is a power of two, scaling and
// unscaling are exact. If S is too large, some S * g exceeds 65504 and becomes
// inf; the step must then be skipped — the weights stay exactly as they were —
// and S made smaller.
//
// Dynamic scaling (PyTorch's GradScaler, apex's DynamicLossScaler) finds the
// largest S that does not overflow, and follows it as the gradients change:
//   - after a step whose gradients hold an inf or NaN: skip the step, S *= backoff (0.5);
//   - after `growth_interval` clean steps in a row: S *= growth (2), count from 0 again.
// So S sits just below the overflow limit, with a skipped step every
// growth_interval steps or so. Every rank must skip the *same* steps, or the
// replicas' weights diverge for good: the inf/NaN flag is allreduced (one int32)
// before the decision, so an overflow on one rank alone skips the step on all.
// (In DDP the gradients themselves are already averaged, so an inf travels
// through the average; the flag makes the decision explicit and also covers
// sharded gradients, lab 06, where each rank sees only its shard.)

// Note [Master weights]
// ~~~~~~~~~~~~~~~~~~~~~
// Why not keep the weights in 16 bits only? An update is lr * g, often 1e-4 of
// the weight or less. In bf16 the spacing at 1.0 is 2^-7 = 0.0078: an update of
// 1e-4 to a weight of 1.0 rounds back to 1.0 and is lost, every step, forever.
// The fp32 master copy accumulates the small updates exactly enough; the 16-bit
// working copy is re-rounded from it after every step. Memory per parameter with
// AdamW (ZeRO's accounting; MemoryTracker categories in brackets):
//
//     fp32           4 value [parameters] + 4 grad [gradients] + 8 m, v [optimizer]      = 16 bytes
//     fp16/bf16      2 working [parameters] + 2 grad [gradients] + 4 master + 8 m, v [optimizer] = 16 bytes
//
// The model state does not shrink. What mixed precision saves is activation
// memory, bandwidth (the gradient allreduce moves 2 bytes per parameter instead
// of 4) and time on hardware with 16-bit matrix units.

// Note [Where to divide]
// ~~~~~~~~~~~~~~~~~~~~~~
// Averaging over W ranks is a sum and a division by W. In fp32 the order does not
// matter; in fp16 it does. Post-divide (sum, then / W): the partial sums grow up
// to W times the gradients and overflow 65504 first — with loss scaling, the
// gradients already sit near the top of the range. Pre-divide (/ W, then sum):
// nothing grows, but each value shrinks by W first and the smallest ones
// underflow. The sum itself is taken in fp32 at each step of the reduction and
// rounded to 16 bits once per step (NCCL does the same), so the rounding error
// grows with the number of reduction steps, not with the number of additions
// inside one. Pre-divide is the default (PyTorch's fp16 compression hook divides
// first); the benchmark measures both.

// Note [Compute copies]
// ~~~~~~~~~~~~~~~~~~~~~
// harness/nn's layers compute in f32 (this is a CPU training core). A GPU kernel
// loads 16-bit weights, widens them to fp32 in registers and accumulates in fp32
// (tensor cores do exactly that). Here the "registers" are an f32 copy of the
// working weights and an f32 gradient buffer that backward writes into, charged
// to MemoryCategory::kOther so that the categories of Note [Master weights] stay
// exact. The numbers are those of the GPU: forward and backward see weights that
// were rounded to 16 bits, and the gradients are rounded to 16 bits before
// anything else reads them. What is not emulated: 16-bit activations (the
// activations stay f32) and the rounding inside a 16-bit GEMM.

// Note [The GPU step]
// ~~~~~~~~~~~~~~~~~~~
// The same src/ files train on a GPU: move the model there first
// (model.to(nn::Device::kCuda)), give the trainer an NCCL backend
// (make_communicator("nccl")) and device batches. Every buffer of Note [Master
// weights] is then allocated on the model's device, and each loop of yours over
// host memory has a kernel in given/mixed_device.h with the same per-element
// arithmetic (given/mixed_device_math.h, which CI checks on the host). One step
// on one rank, two streams:
//
//   compute: fwd/bwd (x S) | round16 | .. wait(done_b) .. | unscale -> flag | wait(done_f) | AdamW, round16 | ...
//                         [ready_b]                                  [ready_f]
//   NCCL:        wait(ready_b) allreduce 16-bit bucket b [done_b]  wait(ready_f) allreduce(flag, 1 x i32) [done_f]
//
// The gradient buckets travel in 16 bits (half the bytes of fp32). The unscale
// kernel writes each rank's inf/NaN flag into one i32 on the device; ONE
// one-element allreduce (a sum of 0/1 flags is their OR: NCCL 2.30 as staged
// here has Sum and Avg only) agrees on it, and only then is one int copied to
// the host, because the host decides whether to launch the optimizer. The
// skip/backoff/growth state machine then runs on the host, identically on every
// rank, exactly as on the CPU. The loss is averaged by one more one-element
// allreduce (an f64 mean) for the report; nothing else leaves the device.

// ---------------------------------------------------------------------------
// Precisions
// ---------------------------------------------------------------------------

/// @brief The precision of the working weights, the gradients and the gradient allreduce.
enum class Precision {
  kF32,   ///< everything fp32: no master copy, no scaling needed
  kF16,   ///< fp16 working copy and gradients, fp32 master weights; needs loss scaling
  kBF16,  ///< bf16 working copy and gradients, fp32 master weights; no loss scaling needed
};

/// @brief The precision's name.
/// @param[in] precision the precision.
/// @return "fp32", "fp16" or "bf16".
const char* precision_name(Precision precision);

/// @brief The element type of the working copy and gradients.
/// @param[in] precision the precision.
/// @return nn::DType::kF32, kF16 or kBF16.
nn::DType precision_dtype(Precision precision);

// ---------------------------------------------------------------------------
// Task A: 16-bit gradient reduction (half_reduce.cc)
// ---------------------------------------------------------------------------

/// @brief One step of a 16-bit reduction: inout[i] = round16(float(inout[i]) + float(in[i])).
///
/// Both operands are widened to fp32, added in fp32, and the sum is rounded once
/// to the 16-bit type (round to nearest, ties to even; overflow gives inf; inf
/// and NaN propagate as IEEE addition says). This is the function that every
/// step of the ring (or Open MPI's tree) applies: HalfSumCommunicator registers
/// it as an MPI user-defined reduction. See Note [Where to divide].
/// @param[in] dtype DType::kF16 or DType::kBF16: what both buffers hold.
/// @param[in] in `count` elements (the incoming partial sum).
/// @param[in,out] inout `count` elements: this rank's partial sum in, the new partial sum out.
/// @param[in] count elements; 0 does nothing (the pointers may then be null).
/// @throws dtl::InvalidArgument for another dtype, or null pointers with count > 0.
void reduce_half_sum(DType dtype, const void* in, void* inout, std::size_t count);

/// @brief buf[i] = round16(float(buf[i]) / divisor), in place.
/// @param[in] dtype DType::kF16 or DType::kBF16.
/// @param[in,out] buf `count` elements.
/// @param[in] count elements.
/// @param[in] divisor > 0 (the world size).
/// @throws dtl::InvalidArgument for another dtype, a null buffer with count > 0, or divisor <= 0.
void divide_half(DType dtype, void* buf, std::size_t count, float divisor);

/// @brief Where allreduce_mean_half() divides by the world size (Note [Where to divide]).
enum class DividePlacement {
  kPre,   ///< divide each rank's values by W, then sum: no overflow from the sum, small values may underflow
  kPost,  ///< sum, then divide by W: partial sums up to W times larger may overflow fp16
};

/// @brief The placement's name.
/// @param[in] placement the placement.
/// @return "pre-divide" or "post-divide".
const char* divide_placement_name(DividePlacement placement);

/// @brief Averages a 16-bit buffer over the ranks of `backend`, dividing where `placement` says.
///
/// kPre: divide_half(buf, W), then a summing allreduce; kPost: a summing
/// allreduce, then divide_half(buf, W). The allreduce is backend.allreduce(buf,
/// count, dtype, ReduceOp::kSum), waited for before returning; over a
/// HalfSumCommunicator its additions are reduce_half_sum(). With W = 1 nothing
/// is divided and nothing changes.
///
/// Collective: every rank of `backend` must call it, with the same count and dtype.
/// @param[in] backend the ranks; it must reduce 16-bit floats (HalfSumCommunicator, or NCCL).
/// @param[in,out] buf `count` elements of `dtype`: this rank's gradients in, the average out.
/// @param[in] count elements (the same on every rank).
/// @param[in] dtype DType::kF16 or DType::kBF16.
/// @param[in] placement where to divide.
/// @throws dtl::InvalidArgument for another dtype (before any communication, on every rank alike).
void allreduce_mean_half(Communicator& backend, void* buf, std::size_t count, DType dtype, DividePlacement placement);

// ---------------------------------------------------------------------------
// Task B: rounding and loss scaling (loss_scaler.cc)
// ---------------------------------------------------------------------------

/// @brief What rounding to 16 bits lost (round_to_half()).
struct RoundStats {
  std::int64_t count = 0;       ///< elements rounded
  std::int64_t nonzero = 0;     ///< finite, non-zero elements of the fp32 input
  std::int64_t underflow = 0;   ///< of those, the ones that became (signed) zero
  std::int64_t overflow = 0;    ///< finite inputs that became inf
  /// @brief The fraction of the non-zero gradients that underflowed.
  /// @return underflow / nonzero, or 0 when nonzero is 0.
  double underflow_fraction() const noexcept {
    return nonzero == 0 ? 0.0 : static_cast<double>(underflow) / static_cast<double>(nonzero);
  }
};

/// @brief Rounds fp32 values into a 16-bit (or fp32) tensor and counts what was lost.
///
/// dst[i] = src[i] rounded to dst's dtype (as nn::convert()). Counts the finite
/// non-zero inputs, those that became zero (underflow) and the finite ones that
/// became inf (overflow). For an f32 dst this is a copy (nothing is lost).
/// @param[out] dst f16, bf16 or f32, src.numel() elements (may be src itself when f32).
/// @param[in] src f32.
/// @return the counts.
/// @throws dtl::InvalidArgument on other dtypes or different element counts.
RoundStats round_to_half(const nn::Tensor& dst, const nn::Tensor& src);

/// @brief How the loss is scaled (Note [Loss scaling]).
enum class ScalingMode {
  kNone,     ///< scale 1 (steps with inf/NaN are still skipped)
  kStatic,   ///< a fixed scale, init_scale
  kDynamic,  ///< GradScaler: back off on overflow, grow after growth_interval clean steps
};

/// @brief The mode's name.
/// @param[in] mode the mode.
/// @return "none", "static" or "dynamic".
const char* scaling_mode_name(ScalingMode mode);

/// @brief A LossScaler's parameters (PyTorch's GradScaler defaults).
struct LossScalerOptions {
  ScalingMode mode = ScalingMode::kDynamic;  ///< which scaling
  float init_scale = 65536.0f;               ///< the first scale (kStatic: the only one); finite, > 0
  float growth_factor = 2.0f;                ///< kDynamic: scale *= this after growth_interval clean steps; > 1
  float backoff_factor = 0.5f;               ///< kDynamic: scale *= this after an overflow; in (0, 1)
  int growth_interval = 2000;                ///< kDynamic: clean steps in a row before growing; >= 1
};

/// @brief Dynamic (or static, or no) loss scaling: the GradScaler algorithm of Note [Loss scaling].
///
/// Per step: backward of scale() * loss; then unscale_and_check() gives the fp32
/// gradients and whether any rank saw an inf/NaN; skip the optimizer step if so;
/// then update(found_inf). The scale is the same on every rank, because every
/// rank makes the same sequence of update() calls with the same (allreduced) flag.
///
/// unscale_and_check() and update() are virtual so that another scaler can take
/// this one's place in a MixedPrecisionTrainer (StepHooks::make_scaler): the
/// grading tests of task C use one of their own, so that a fault here costs
/// task B's items only.
class LossScaler {
 public:
  /// @brief A scaler at options.init_scale (1 for kNone).
  /// @param[in] options the parameters.
  /// @throws dtl::InvalidArgument naming the first bad option (and the rank).
  explicit LossScaler(LossScalerOptions options = {});
  virtual ~LossScaler() = default;
  LossScaler(const LossScaler&) = delete;
  LossScaler& operator=(const LossScaler&) = delete;

  /// @brief The scale for the next backward.
  /// @return S (1 for ScalingMode::kNone).
  float scale() const noexcept { return scale_; }
  /// @return the options.
  const LossScalerOptions& options() const noexcept { return options_; }
  /// @return clean steps in a row, counted the same way in every mode: 0 at the start
  ///         and after an overflow, and back to 0 when the count reaches growth_interval
  ///         (where kDynamic grows the scale; kNone and kStatic wrap the count and keep the
  ///         scale). So it is always in [0, growth_interval).
  int clean_steps() const noexcept { return clean_steps_; }
  /// @return how many update(true) calls there were: the skipped steps.
  std::int64_t skipped_steps() const noexcept { return skipped_; }

  /// @brief Unscales 16-bit (or fp32) gradients into fp32 and decides, with every
  /// rank, whether the step must be skipped.
  ///
  /// out[i] = float(grads[i]) * (1 / scale()), computed in fp32. found_inf is
  /// true on this rank if any out[i] is inf or NaN; the flag is then summed over
  /// the ranks (an int32 allreduce on `backend`), so the result is the same on
  /// every rank: true if any rank found one. The flag lives where the gradients do:
  /// on the GPU the unscale kernel sets it, the one-element allreduce agrees on it
  /// there, and one int comes back to the host (Note [The GPU step]).
  ///
  /// Collective: every rank of `backend` must call it.
  /// @param[in] backend the ranks that must agree.
  /// @param[in] grads f16, bf16 or f32: the (averaged) scaled gradients.
  /// @param[out] out f32, grads.numel() elements on grads' device (may be grads itself when grads is f32).
  /// @return true on every rank if any rank's gradients hold an inf or NaN.
  /// @throws dtl::InvalidArgument on wrong dtypes or counts (the same on every rank
  ///         when the shapes are; the caller must keep them the same).
  virtual bool unscale_and_check(Communicator& backend, const nn::Tensor& grads, const nn::Tensor& out);

  /// @brief Moves the scale after a step (kDynamic only; kNone and kStatic keep it).
  ///
  /// found_inf: scale *= backoff_factor, clean_steps = 0, skipped_steps += 1.
  /// Otherwise: clean_steps += 1, and if it reaches growth_interval,
  /// scale *= growth_factor and clean_steps = 0. kNone and kStatic do exactly the
  /// same with the counters (clean_steps also returns to 0 at growth_interval) and
  /// never change the scale.
  /// @param[in] found_inf what unscale_and_check() returned for this step.
  virtual void update(bool found_inf);

 protected:
  LossScalerOptions options_;  ///< as constructed
  float scale_ = 1.0f;         ///< what scale() returns
  int clean_steps_ = 0;        ///< what clean_steps() returns
  std::int64_t skipped_ = 0;   ///< what skipped_steps() returns
  nn::Tensor flag_;            ///< the found-inf flag: one i32 on the gradients' device (Note [The GPU step])
};

// ---------------------------------------------------------------------------
// Task C: the mixed-precision DDP step (mixed_trainer.cc)
// ---------------------------------------------------------------------------

/// @brief Stand-ins for what a step takes from tasks A and B; each one left empty means the lab's own.
///
/// A MixedPrecisionTrainer reaches tasks A and B only through its helpers
/// round_grads() and average_bucket() and through the scaler it owns, which use
/// these when they are set. The grading tests of task C set all three to oracles
/// written in the tests (harness/nn and the vendor MPI only), so that a fault in
/// task A or B costs that task's items only; the "A+B+C" item runs everything of
/// yours together. `average` is what PyTorch calls a DDP communication hook (its
/// fp16_compress_hook is an allreduce_mean_half()).
struct StepHooks {
  /// Rounds the fp32 gradients `src` into the 16-bit `dst` and counts the losses. Empty: round_to_half().
  std::function<RoundStats(const nn::Tensor& dst, const nn::Tensor& src)> round;
  /// Averages one bucket of 16-bit gradients over the ranks of `backend`. Empty: allreduce_mean_half().
  std::function<void(Communicator& backend, void* buf, std::size_t count, DType dtype, DividePlacement placement)>
      average;
  /// Makes the trainer's loss scaler. Empty: a LossScaler of these options.
  std::function<std::unique_ptr<LossScaler>(const LossScalerOptions& options)> make_scaler;
};

/// @brief How a MixedPrecisionTrainer is set up.
struct MixedOptions {
  Precision precision = Precision::kF16;                   ///< working copy, gradients, communication
  LossScalerOptions scaler{};                              ///< the loss scaling (kNone is the usual choice for bf16 and fp32)
  DividePlacement divide = DividePlacement::kPre;          ///< where the average divides (16-bit only)
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;    ///< gradient buckets of at most this many bytes (> 0)
  nn::AdamWOptions adamw{.lr = 1e-3f, .weight_decay = 0.0f};  ///< the optimizer over the master weights
  StepHooks hooks{};                                       ///< stand-ins for tasks A and B (empty: yours)
};

/// @brief What one MixedPrecisionTrainer::step() did.
struct StepResult {
  double loss = 0.0;            ///< the unscaled loss: the mean of the ranks' mean losses (an fp64 kAvg allreduce), which is the mean over every row when every rank has as many rows
  float scale = 1.0f;           ///< the loss scale this step's backward used
  bool skipped = false;         ///< the gradients held an inf/NaN on some rank: the weights did not move
  RoundStats rounding;          ///< what rounding this rank's scaled gradients to 16 bits lost
  std::int64_t comm_bytes = 0;  ///< bytes of gradient allreduced by this rank (the sum of the buckets' sizes)
  int buckets = 0;              ///< gradient allreduces issued
  double comm_seconds = 0.0;    ///< wall time of the gradient averaging
};

/// @brief Mixed-precision data-parallel training of one model (Note [Master weights]).
///
/// Set-up (constructor), for a 16-bit precision:
///   - the model's f32 values and gradients become the compute copies (flattened,
///     charged to MemoryCategory::kOther; Note [Compute copies]);
///   - master (f32, kOptimizerState) = rank 0's weights (broadcast), AdamW state
///     (kOptimizerState), the working copy (16-bit, kParameters) = round(master),
///     the gradients (16-bit, kGradients), and compute values = widen(working).
/// For Precision::kF32 the model's own values and gradients are flattened
/// (kParameters, kGradients) and are the master weights and gradients.
/// In every precision the flattening is nn::flatten_values() / nn::flatten_grads()
/// over model.parameters(): the Parameters become views of the trainer's buffers,
/// and the Model's own flat buffers (Model::flatten_values(), model.flat_values())
/// are neither needed nor looked at by the tests.
///
/// One step:
///
///     loss  = CE(model.forward(x), targets)            compute copies hold widen(working)
///     model.backward(dL/dlogits * S)                   S = scaler().scale()
///     grads = round16(compute grads)                   round_grads(): RoundStats
///     average grads over the ranks, bucket by bucket   average_bucket(): allreduce_mean_half (f32: ReduceOp::kAvg)
///     found = scaler.unscale_and_check(grads -> compute grads, in fp32)
///     if !found: AdamW(master, compute grads); working = round16(master); compute = widen(working)
///     scaler.update(found)
///
/// The pieces of tasks A and B are reached only through round_grads(),
/// average_bucket() and the scaler (see StepHooks).
///
/// Every rank must construct its trainer together and call step() together.
class MixedPrecisionTrainer {
 public:
  /// @brief Flattens the model, broadcasts rank 0's weights, builds the copies above.
  ///
  /// Collective over `backend` (a broadcast).
  /// @param[in] backend the data-parallel ranks; must outlive the trainer. 16-bit
  ///            precisions need a backend that reduces 16-bit floats (make_communicator()).
  /// @param[in,out] model an f32 model that was not flattened; must outlive the trainer.
  /// @param[in] options precision, scaling, divide placement, bucket cap, AdamW.
  /// @throws dtl::InvalidArgument naming the argument (and the rank) if the model is
  ///         not f32, is already flattened, or the bucket cap is 0; or as LossScaler.
  MixedPrecisionTrainer(Communicator& backend, nn::Model& model, MixedOptions options);
  MixedPrecisionTrainer(const MixedPrecisionTrainer&) = delete;
  MixedPrecisionTrainer& operator=(const MixedPrecisionTrainer&) = delete;

  /// @brief One training step on this rank's rows (see the class comment).
  ///
  /// Collective: every rank must call it, once per step.
  /// @param[in] x this rank's inputs (MLP: (B, in) f32; GPT: (B, T) i32).
  /// @param[in] targets this rank's targets ((B) or (B, T) i32).
  /// @return the loss, the scale used, whether the step was skipped, the rounding and communication counts.
  StepResult step(const nn::Tensor& x, const nn::Tensor& targets);

  /// @return the fp32 master weights (Precision::kF32: the model's flat values), flat.
  const nn::Tensor& master() const noexcept { return master_; }
  /// @return the working copy that forward uses (16-bit, or the master weights for kF32), flat.
  const nn::Tensor& working() const noexcept { return working_; }
  /// @return the (averaged, still scaled) gradients of the last step, in the working dtype, flat.
  const nn::Tensor& grads() const noexcept { return grads_; }
  /// @return the loss scaler.
  const LossScaler& scaler() const noexcept { return *scaler_; }
  /// @return the optimizer (its steps() counts the steps that were not skipped).
  const nn::AdamW& optimizer() const noexcept { return *adamw_; }
  /// @return the options.
  const MixedOptions& options() const noexcept { return options_; }
  /// @return the model.
  nn::Model& model() noexcept { return model_; }

 private:
  /// @brief grads_ = round16(compute_grads_), with options().hooks.round or round_to_half().
  /// @return what the rounding lost.
  RoundStats round_grads();
  /// @brief Averages grads_[offset, offset + count) over the ranks and waits: 16-bit with
  /// options().hooks.average or allreduce_mean_half() (options().divide); f32 with ReduceOp::kAvg.
  /// @param[in] offset the bucket's first element. @param[in] count its elements.
  void average_bucket(std::size_t offset, std::size_t count);

  Communicator& backend_;
  nn::Model& model_;
  MixedOptions options_;
  std::unique_ptr<LossScaler> scaler_;  // options.hooks.make_scaler's, or a LossScaler
  nn::Tensor compute_values_, compute_grads_;  // f32 views the layers use (kOther; for kF32 the model's own)
  nn::Tensor master_, working_, grads_;        // see the accessors
  std::unique_ptr<nn::AdamW> adamw_;
  nn::SoftmaxCrossEntropy loss_;
};

// ---------------------------------------------------------------------------
// The backend (half_communicator.cc, given)
// ---------------------------------------------------------------------------

/// @brief Open MPI with 16-bit sums: allreduce and reduce_scatter of kF16 and
/// kBF16 use MPI's own algorithms with your reduce_half_sum() as a user-defined
/// reduction (MPI_Op_create), so every addition is done in fp32 and stored in 16 bits.
///
/// f32, f64 and i32 use MPI_SUM (ReduceOp::kAvg: sum, then divide_in_place()).
/// 16-bit types take ReduceOp::kSum only: where the divide goes is
/// allreduce_mean_half()'s choice. Blocking MPI calls on a communication thread
/// (CommThread), FIFO, on a duplicate of the parent. Needs MPI_THREAD_MULTIPLE.
class HalfSumCommunicator final : public Communicator {
 public:
  /// @brief Duplicates `parent` (collective over it), creates the two MPI ops, starts the thread.
  /// @param[in] parent e.g. MPI_COMM_WORLD.
  /// @throws dtl::Error when MPI was initialized below MPI_THREAD_MULTIPLE.
  explicit HalfSumCommunicator(MPI_Comm parent);
  /// @brief Completes what is queued, stops the thread, frees the ops and the communicator.
  ~HalfSumCommunicator() override;
  HalfSumCommunicator(const HalfSumCommunicator&) = delete;
  HalfSumCommunicator& operator=(const HalfSumCommunicator&) = delete;

  /// @return this process's rank.
  int rank() const override { return rank_; }
  /// @return the number of ranks.
  int world_size() const override { return size_; }
  /// @return "mpi-half".
  std::string name() const override { return "mpi-half"; }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL, bf16_sum_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<CommThread> thread_;
};

/// @brief Makes a backend from its name. Collective over `parent`.
///
/// Names: "mpi-half" (HalfSumCommunicator), "emulated:LINK" (EmulatedCommunicator
/// over mpi-half; LINK as parse_link(), e.g. "emulated:10GbE"), "nccl" (where
/// NCCL was found: NcclCommunicator, device buffers only; NCCL sums fp16 in fp32 too).
/// @param[in] name the backend's name.
/// @param[in] parent the ranks, e.g. MPI_COMM_WORLD.
/// @return the communicator.
/// @throws dtl::InvalidArgument for an unknown name, or "nccl" in a build without NCCL.
std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm parent);

}  // namespace dtl::lab05
