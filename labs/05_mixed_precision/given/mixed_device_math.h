// Lab 05, given (not a task): the per-element arithmetic of the device path,
// written once for the GPU kernels (given/mixed_device.cu) and the host, where
// tests/mixed_device_logic_test.cc checks it against your CPU functions and CI
// runs it without a GPU. The 16-bit conversions themselves are
// harness/nn/kernels/half_math.cuh's (checked bit for bit against half.h).
#pragma once

#include <cstdint>

#include "harness/nn/kernels/half_math.cuh"

namespace dtl::lab05::device_math {

/// @brief What rounding one fp32 value lost, as bits: kNonzero, kUnderflow, kOverflow (RoundStats).
inline constexpr unsigned kNonzero = 1u, kUnderflow = 2u, kOverflow = 4u;

/// @brief Classifies one rounding exactly as round_to_half() counts it: a finite
/// non-zero input is kNonzero, and kUnderflow too if it rounded to zero; a finite
/// input that rounded to inf is kOverflow. Inputs inf and NaN count as nothing.
/// @param[in] value the fp32 input. @param[in] rounded the same value after rounding, widened back.
/// @return an OR of the bits above.
DTL_NN_HD inline unsigned round_class(float value, float rounded) {
  const float big = 3.4028234663852886e38f;  // FLT_MAX: |x| <= big is finite (false for NaN)
  if (!(value <= big && value >= -big)) return 0u;
  unsigned c = 0u;
  if (value != 0.0f) c |= rounded == 0.0f ? (kNonzero | kUnderflow) : kNonzero;
  if (!(rounded <= big && rounded >= -big)) c |= kOverflow;  // a finite value rounds to inf, never to NaN
  return c;
}

/// @brief divide_half()'s element: round16(float(bits) / divisor).
/// @param[in] kind nn::kernels::kF16Kind or kBF16Kind. @param[in] bits the element. @param[in] divisor W.
/// @return the quotient's 16 bits.
DTL_NN_HD inline std::uint16_t divide16(int kind, std::uint16_t bits, float divisor) {
  return nn::kernels::narrow16(kind, nn::kernels::widen16(kind, bits) / divisor);
}

/// @brief The found-inf test of one unscaled gradient: true for inf and NaN.
/// @param[in] unscaled float(g) / S.
/// @return whether the step must be skipped on its account.
DTL_NN_HD inline bool not_finite(float unscaled) {
  const float big = 3.4028234663852886e38f;
  return !(unscaled <= big && unscaled >= -big);
}

}  // namespace dtl::lab05::device_math
