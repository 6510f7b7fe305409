// fp16 and bf16 rounding for the GPU kernels, written once for the GPU and the
// host; tests/half_math_test.cc checks it on the host against half.h (the CPU's
// conversions) bit for bit: every 16-bit pattern, every rounding boundary, NaN
// payloads included.
//
// What this file teaches: two ways to round to nearest, ties to even, each the
// other one of half.h's pair, so that each side checks a different algorithm.
//
//   - f32 -> f16 lets the floating-point adder do the rounding (the "magic
//     number" method, F. Giesen's float_to_half_fast3_rtne): to round to fp16's
//     10 fraction bits, add a power of two big enough that the float's own
//     round-to-nearest-even throws away exactly the bits fp16 cannot keep, then
//     read the bits. Normal results do the same with integers: add just under
//     half a unit of the kept part, plus its lowest bit (ties to even), shift.
//     It needs the adder in round-to-nearest with subnormals kept: nvcc's
//     default, and the host's (no -ffast-math, no --use_fast_math here).
//   - f32 -> bf16 compares the dropped 16 bits with the halfway point, the way
//     half.h rounds fp16.
//
// Unlike CUDA's __float2half_rn / __float2bfloat16_rn, NaN keeps its payload
// (quieted), exactly as half.h does: the GPU's 16-bit copies and the CPU's are
// then equal bit for bit in every case, which lab 05's tests rely on.
#pragma once

#ifndef DTL_NN_HD
#if defined(__CUDACC__)
#define DTL_NN_HD __host__ __device__
#else
#define DTL_NN_HD
#endif
#endif

#include <cstdint>
#include <cstring>

namespace dtl::nn::kernels {

/// @brief The bits of a float (memcpy: defined behaviour on both sides, one move in registers).
DTL_NN_HD inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
/// @brief The float with these bits.
DTL_NN_HD inline float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// @brief f32 -> f16 bits, round to nearest, ties to even; overflow to inf; NaN quieted, payload kept.
DTL_NN_HD inline std::uint16_t f32_to_f16_rne(float value) {
  std::uint32_t u = float_bits(value);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;  // |value|
  std::uint32_t h;
  if (u >= (127u + 16u) << 23) {  // |value| >= 65536: inf (also after rounding), or NaN
    h = u > 0x7f800000u ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u;
  } else if (u < 113u << 23) {  // |value| < 2^-14: an fp16 subnormal or zero
    // 0.5 = 2^-1 has its last fraction bit worth 2^-24, fp16's smallest
    // subnormal: the float sum rounds |value| to a multiple of 2^-24 (ties to
    // even), and the fraction bits of the sum are then that multiple.
    const float magic = 0.5f;
    h = float_bits(bits_float(u) + magic) - float_bits(magic);
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;  // the lowest bit that fp16 keeps
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;  // rebias; round on the 13 dropped bits
    h = u >> 13;  // a carry out of the fraction raises the exponent, up to inf: right
  }
  return static_cast<std::uint16_t>(h | (sign >> 16));
}

/// @brief f16 bits -> f32, exact: the subnormals through one float multiply (m 2^-24 is exact).
DTL_NN_HD inline float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t fraction = bits & 0x3ffu;
  std::uint32_t u;
  if (exponent == 0x1fu) {
    u = 0x7f800000u | (fraction << 13);  // inf or NaN, payload on top
  } else if (exponent == 0) {
    u = float_bits(static_cast<float>(fraction) * 5.9604644775390625e-8f);  // fraction * 2^-24
  } else {
    u = ((exponent + 127u - 15u) << 23) | (fraction << 13);
  }
  return bits_float(u | sign);
}

/// @brief f32 -> bf16 bits, round to nearest, ties to even; NaN quieted, payload kept.
DTL_NN_HD inline std::uint16_t f32_to_bf16_rne(float value) {
  const std::uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  std::uint32_t kept = u >> 16;
  const std::uint32_t dropped = u & 0xffffu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u))) ++kept;  // carries into the exponent, to inf: right
  return static_cast<std::uint16_t>(kept);
}

/// @brief bf16 bits -> f32, exact: bf16 is the top half of a float.
DTL_NN_HD inline float bf16_to_f32(std::uint16_t bits) { return bits_float(static_cast<std::uint32_t>(bits) << 16); }

/// @brief Element kinds of the 16-bit kernels: 1 = f16, 2 = bf16 (0 = f32; kernels.h).
inline constexpr int kF16Kind = 1;
/// @copydoc kF16Kind
inline constexpr int kBF16Kind = 2;

/// @brief A 16-bit element of `kind` widened to float.
DTL_NN_HD inline float widen16(int kind, std::uint16_t bits) {
  return kind == kF16Kind ? f16_to_f32(bits) : bf16_to_f32(bits);
}
/// @brief A float rounded once to a 16-bit element of `kind`.
DTL_NN_HD inline std::uint16_t narrow16(int kind, float value) {
  return kind == kF16Kind ? f32_to_f16_rne(value) : f32_to_bf16_rne(value);
}

/// @brief Lab 05's 16-bit sum: a + b added exactly in float (both are 16-bit values) and rounded once.
DTL_NN_HD inline std::uint16_t half_sum(int kind, std::uint16_t a, std::uint16_t b) {
  return narrow16(kind, widen16(kind, a) + widen16(kind, b));
}

/// @brief Lab 05's unscale: a 16-bit gradient widened and multiplied by 1/S in float.
DTL_NN_HD inline float unscale16(int kind, std::uint16_t g, float inv_scale) { return widen16(kind, g) * inv_scale; }

}  // namespace dtl::nn::kernels
