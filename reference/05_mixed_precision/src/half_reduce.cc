// Lab 05, task A: averaging 16-bit gradients across ranks.
//
// What this file teaches: a 16-bit allreduce moves half the bytes of an fp32
// one, but its arithmetic needs care in two places.
//
//  1. Each reduction step (one hop of a ring, one level of a tree) widens both
//     operands to fp32, adds, and rounds the sum to 16 bits once. Rounding after
//     every *step*, not after every addition of a long sum, is what keeps the
//     error small: a ring of W ranks rounds W-1 times per element.
//
//       rank 0: 1024    rank 1: 0.5    rank 2: 0.5          (fp16 spacing at 1024 is 1)
//       hop 1: round(1024 + 0.5) = round(1024.5) = 1024     (a tie: to even)
//       hop 2: round(1024 + 0.5) = 1024
//       the exact sum, 1025, is representable: rounding once would have kept it.
//     A 16-bit sum loses what falls below the spacing at each hop; an fp32
//     accumulator across hops (a tree or ring that sends fp32) would not, at
//     twice the bytes.
//
//  2. The divide by W: before the sum (nothing grows, small values may
//     underflow) or after it (partial sums up to W times larger may overflow
//     65504). See Note [Where to divide] in lab05/mixed.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab05/mixed.h"
#include "mixed_device.h"
#include "mixed_setup.h"

namespace dtl::lab05 {

void reduce_half_sum(DType dtype, const void* in, void* inout, std::size_t count) {
  require_half(dtype, "reduce_half_sum");
  DTL_REQUIRE_ARG(count == 0 || (in != nullptr && inout != nullptr), "reduce_half_sum", "in/inout",
                  "is null with count " + std::to_string(count));
  // BEGIN SOLUTION(reduce_half_sum)
  // | On return inout[i] holds in[i] + inout[i] as the exact sum of the two 16-bit values
  // | (dtype: f16 or bf16, raw std::uint16_t bit patterns) rounded ONCE back to 16 bits, for
  // | every i < count; no intermediate rounding (handout Task A, Note [fp16 and bf16]). nn::
  // | has the bit conversions.
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* acc = static_cast<std::uint16_t*>(inout);
  for (std::size_t i = 0; i < count; ++i) acc[i] = narrow(dtype, widen(dtype, acc[i]) + widen(dtype, a[i]));
  // END SOLUTION
}

void divide_half(DType dtype, void* buf, std::size_t count, float divisor) {
  require_half(dtype, "divide_half");
  DTL_REQUIRE_ARG(count == 0 || buf != nullptr, "divide_half", "buf", "is null with count " + std::to_string(count));
  DTL_REQUIRE_ARG(divisor > 0.0f, "divide_half", "divisor", "is " + std::to_string(divisor) + ", must be > 0");
  // A gradient bucket on the GPU (NCCL): the same rounding, one kernel (given/mixed_device.h).
  if (is_device_pointer(buf)) return divide_half_on_device(dtype, buf, count, divisor);
  // BEGIN SOLUTION(divide_half)
  // | On return buf[i] holds the 16-bit value buf[i] / divisor computed in float and rounded
  // | once, for every i < count (handout Task A).
  auto* h = static_cast<std::uint16_t*>(buf);
  for (std::size_t i = 0; i < count; ++i) h[i] = narrow(dtype, widen(dtype, h[i]) / divisor);
  // END SOLUTION
}

void allreduce_mean_half(Communicator& backend, void* buf, std::size_t count, DType dtype, DividePlacement placement) {
  require_half(dtype, "allreduce_mean_half");
  const auto world = static_cast<float>(backend.world_size());
  // BEGIN SOLUTION(allreduce_mean_half)
  // | On return every rank's buf holds the mean over the W ranks, with the division placed
  // | before or after a ReduceOp::kSum allreduce on `backend` as `placement` says (Note [Where
  // | to divide]), the allreduce waited for; with one rank buf is unchanged (handout Task A).
  if (backend.world_size() == 1) return;
  if (placement == DividePlacement::kPre) divide_half(dtype, buf, count, world);
  backend.allreduce(buf, count, dtype, ReduceOp::kSum).wait();
  if (placement == DividePlacement::kPost) divide_half(dtype, buf, count, world);
  // END SOLUTION
}

}  // namespace dtl::lab05
