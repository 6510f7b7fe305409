// Lab 05, task B: rounding gradients to 16 bits, and dynamic loss scaling.
//
// What this file teaches: why fp16 training needs a loss scale, and the small
// state machine (PyTorch's GradScaler) that chooses it. See Note [fp16 and
// bf16] and Note [Loss scaling] in lab05/mixed.h.
//
// A trajectory with init_scale 2^10, growth_interval 3 (c = clean steps so far):
//
//     step   0     1     2     3     4      5     6     7     8
//     scale  2^10  2^10  2^10  2^11  2^11   2^10  2^10  2^10  2^11
//     grads  ok    ok    ok    ok    inf    ok    ok    ok    ok
//     c      1     2     3->0  1     0      1     2     3->0  1
//     step   taken taken taken taken SKIP   taken taken taken taken
//
// after step 2 (3 clean steps) the scale doubles; step 4 overflows, is skipped
// and halves it; three clean steps later it doubles again.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab05/mixed.h"
#include "mixed_device.h"

namespace dtl::lab05 {

RoundStats round_to_half(const nn::Tensor& dst, const nn::Tensor& src) {
  DTL_REQUIRE_ARG(src.defined() && src.dtype() == nn::DType::kF32, "round_to_half", "src", "must be an f32 tensor");
  DTL_REQUIRE_ARG(dst.defined() && (dst.dtype() == nn::DType::kF16 || dst.dtype() == nn::DType::kBF16 ||
                                    dst.dtype() == nn::DType::kF32),
                  "round_to_half", "dst", "must be an f16, bf16 or f32 tensor");
  DTL_REQUIRE_ARG(dst.numel() == src.numel(), "round_to_half", "dst",
                  "has " + std::to_string(dst.numel()) + " elements, src has " + std::to_string(src.numel()));
  DTL_REQUIRE_ARG(dst.device() == src.device(), "round_to_half", "dst", "is not on src's device");
  // Tensors on the GPU: the same rounding and counts, in a kernel (given/mixed_device.h).
  if (src.device() == nn::Device::kCuda) return round_to_half_on_device(dst, src);
  RoundStats stats;
  stats.count = src.numel();
  // BEGIN SOLUTION(round_to_half)
  // | Store every src value rounded to dst's dtype (f16, bf16, or f32 unchanged) into dst,
  // | and fill `stats` (returned below; count is set above): `nonzero` counts the finite
  // | non-zero inputs, `underflow` those of them that round to zero, `overflow` the finite
  // | inputs that round to inf (RoundStats in the header; handout Task B, section (b)).
  const std::span<const float> in = src.span<float>();
  auto count = [&stats](float v, float rounded) {
    if (!std::isfinite(v)) return;
    if (v != 0.0f) {
      ++stats.nonzero;
      if (rounded == 0.0f) ++stats.underflow;
    }
    if (std::isinf(rounded)) ++stats.overflow;
  };
  if (dst.dtype() == nn::DType::kF16) {
    nn::f16* out = dst.data<nn::f16>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      out[i] = nn::f16(in[i]);
      count(in[i], static_cast<float>(out[i]));
    }
  } else if (dst.dtype() == nn::DType::kBF16) {
    nn::bf16* out = dst.data<nn::bf16>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      out[i] = nn::bf16(in[i]);
      count(in[i], static_cast<float>(out[i]));
    }
  } else {
    float* out = dst.data<float>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float v = in[i];
      out[i] = v;
      count(v, v);
    }
  }
  // END SOLUTION
  return stats;
}

bool LossScaler::unscale_and_check(Communicator& backend, const nn::Tensor& grads, const nn::Tensor& out) {
  DTL_REQUIRE_ARG(grads.defined() && (grads.dtype() == nn::DType::kF16 || grads.dtype() == nn::DType::kBF16 ||
                                      grads.dtype() == nn::DType::kF32),
                  "LossScaler::unscale_and_check", "grads", "must be an f16, bf16 or f32 tensor");
  DTL_REQUIRE_ARG(out.defined() && out.dtype() == nn::DType::kF32 && out.numel() == grads.numel() &&
                      out.device() == grads.device(),
                  "LossScaler::unscale_and_check", "out",
                  "must be an f32 tensor of " + std::to_string(grads.numel()) + " elements on grads' device");
  // BEGIN SOLUTION(LossScaler::unscale_and_check)
  // | out = grads unscaled into fp32 exactly as the header's unscale_and_check() says (the
  // | unscale in fp32, so that gradients below 16-bit range come out exact); return true on
  // | EVERY rank of backend if any rank's out holds an inf or NaN, agreed with one int32
  // | allreduce on a flag that lives where the gradients do (zeroed_flag(flag_, ...); on the
  // | GPU unscale_on_device() sets it and read_flag() reads it once, after the allreduce)
  // | (handout Task B, Note [Loss scaling], Note [The GPU step]). Argument checks are written above.
  // One flag per rank, on the gradients' device: set by the unscale, then summed
  // over the ranks by ONE one-element allreduce (a sum of 0/1 flags is their OR;
  // NCCL and MPI both sum i32). Only the agreed flag comes back to the host.
  const float inv = 1.0f / scale_;
  const nn::Tensor& flag = zeroed_flag(flag_, grads.device());
  if (grads.device() == nn::Device::kCuda) {
    unscale_on_device(grads, out, inv, flag);  // the kernel sets flag[0] = 1 on an inf or NaN
  } else {
    float* o = out.data<float>();
    const auto n = static_cast<std::size_t>(grads.numel());
    bool found = false;
    auto put = [&](std::size_t i, float g) {
      o[i] = g * inv;
      found = found || !std::isfinite(o[i]);
    };
    if (grads.dtype() == nn::DType::kF16) {
      const nn::f16* g = grads.data<nn::f16>();
      for (std::size_t i = 0; i < n; ++i) put(i, static_cast<float>(g[i]));
    } else if (grads.dtype() == nn::DType::kBF16) {
      const nn::bf16* g = grads.data<nn::bf16>();
      for (std::size_t i = 0; i < n; ++i) put(i, static_cast<float>(g[i]));
    } else {
      const float* g = grads.data<float>();
      for (std::size_t i = 0; i < n; ++i) put(i, g[i]);
    }
    flag.data<std::int32_t>()[0] = found ? 1 : 0;
  }
  backend.allreduce(flag.raw(), 1, DType::kI32, ReduceOp::kSum).wait();
  return read_flag(flag) > 0;
  // END SOLUTION
}

void LossScaler::update(bool found_inf) {
  // BEGIN SOLUTION(LossScaler::update)
  // | Move the scaler's state after a step as the header's update() and Note [Loss scaling]
  // | define it: scale(), clean_steps() and skipped_steps() afterwards must be what they say,
  // | for every ScalingMode (kNone and kStatic count but never change the scale) (handout
  // | Task B).
  const bool dynamic = options_.mode == ScalingMode::kDynamic;
  if (found_inf) {
    ++skipped_;
    clean_steps_ = 0;
    if (dynamic) scale_ *= options_.backoff_factor;
    return;
  }
  if (++clean_steps_ == options_.growth_interval) {
    clean_steps_ = 0;
    if (dynamic) scale_ *= options_.growth_factor;
  }
  // END SOLUTION
}

}  // namespace dtl::lab05
