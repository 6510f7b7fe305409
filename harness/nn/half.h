/// @file
/// @brief fp16 and bf16: 16-bit floating-point storage types and their exact conversions.
///
/// What this file teaches: how a 32-bit float becomes a 16-bit one. Both
/// formats keep a sign bit, an exponent and a mantissa; they differ in how the
/// 15 remaining bits are split:
///
///     float32   s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm   (8 exponent, 23 mantissa bits, bias 127)
///     fp16      s eeeee    mmmmmmmmmm                (5 exponent, 10 mantissa bits, bias 15)
///     bf16      s eeeeeeee mmmmmmm                   (8 exponent,  7 mantissa bits, bias 127)
///
/// bf16 is the top half of a float: same range, fewer digits. fp16 has more
/// digits but a tiny range (largest finite 65504, smallest normal 2^-14,
/// smallest subnormal 2^-24) — which is why lab 05 needs loss scaling for fp16
/// and not for bf16.
///
/// Rounding is round-to-nearest, ties to even (RNE), the IEEE default and what
/// CUDA's `__float2half_rn` / `__float2bfloat16_rn` do. Values too large round
/// to infinity; values too small become subnormals or zero; infinities stay
/// infinities; a NaN stays a NaN (sign and the top payload bits kept, the quiet
/// bit set — CUDA instead returns one canonical NaN, 0x7fff, so compare NaNs by
/// "is NaN", not by bits). Everything is portable C++ (no intrinsics), so the
/// same bits come out on every machine.
#pragma once

#include <bit>
#include <cstdint>

namespace dtl::nn {

/// @brief Rounds a float to the nearest fp16 (ties to even) and returns its bits.
/// @param[in] value any float, including subnormals, infinities and NaN.
/// @return the IEEE binary16 bit pattern.
constexpr std::uint16_t float_to_f16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exponent = (x >> 23) & 0xffu;
  const std::uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) {  // infinity or NaN
    if (mantissa == 0) return static_cast<std::uint16_t>(sign | 0x7c00u);
    // Keep the top payload bits and set the quiet bit, so the result is a NaN.
    return static_cast<std::uint16_t>(sign | 0x7e00u | (mantissa >> 13));
  }
  // The fp16 exponent field this value would have as a normal number.
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (e <= 0) {
    // An fp16 subnormal is m * 2^-24 with m in [0, 1023]. The float is
    // full * 2^(exponent - 150) with the implicit bit made explicit, so
    // m = full >> (126 - exponent), rounded. Below 2^-25 it rounds to zero.
    const int shift = 126 - static_cast<int>(exponent);
    if (shift > 24) return static_cast<std::uint16_t>(sign);
    const std::uint32_t full = mantissa | 0x800000u;
    std::uint32_t m = full >> shift;
    const std::uint32_t rest = full & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (m & 1u))) ++m;  // may carry into the smallest normal: right
    return static_cast<std::uint16_t>(sign | m);
  }
  // Normal: keep 10 of the 23 mantissa bits and round on the 13 dropped ones.
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may reach 0x7c00: infinity, right
  return static_cast<std::uint16_t>(sign | h);
}

/// @brief Converts fp16 bits to the float with exactly the same value.
/// @param[in] bits an IEEE binary16 bit pattern (any of the 65,536).
/// @return the float (every fp16 value is exactly representable as a float).
constexpr float f16_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) {  // infinity or NaN (payload moved to the top of the float's)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
    // Subnormal m * 2^-24: shift the leading 1 up to the implicit position,
    // lowering the exponent by one per shift.
    std::uint32_t e = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

/// @brief Rounds a float to the nearest bf16 (ties to even) and returns its bits.
/// @param[in] value any float, including subnormals, infinities and NaN.
/// @return the bfloat16 bit pattern (the top 16 bits of the rounded float).
constexpr std::uint16_t float_to_bf16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncating could clear the payload, so force quiet
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  }
  // Add just under half of the dropped part's unit, plus one when the kept
  // part is odd: a tie then carries exactly when the kept part is odd (RNE).
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

/// @brief Converts bf16 bits to the float with exactly the same value.
/// @param[in] bits a bfloat16 bit pattern (any of the 65,536).
/// @return the float whose top 16 bits are `bits` and low 16 bits zero.
constexpr float bf16_bits_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// @brief IEEE binary16 ("half"): 16 bits of storage, converted explicitly to and from float.
struct f16 {
  std::uint16_t bits = 0;  ///< the raw bit pattern

  /// @brief Positive zero.
  constexpr f16() noexcept = default;
  /// @brief The fp16 nearest to `value` (ties to even).
  /// @param[in] value the float to round.
  constexpr explicit f16(float value) noexcept : bits(float_to_f16_bits(value)) {}
  /// @brief Reinterprets a bit pattern.
  /// @param[in] raw the bits.
  /// @return the fp16 with exactly these bits.
  static constexpr f16 from_bits(std::uint16_t raw) noexcept {
    f16 h;
    h.bits = raw;
    return h;
  }
  /// @brief The exact value as a float.
  /// @return the float equal to this fp16.
  constexpr explicit operator float() const noexcept { return f16_bits_to_float(bits); }
};

/// @brief bfloat16: the top 16 bits of a float, converted explicitly to and from float.
struct bf16 {
  std::uint16_t bits = 0;  ///< the raw bit pattern

  /// @brief Positive zero.
  constexpr bf16() noexcept = default;
  /// @brief The bf16 nearest to `value` (ties to even).
  /// @param[in] value the float to round.
  constexpr explicit bf16(float value) noexcept : bits(float_to_bf16_bits(value)) {}
  /// @brief Reinterprets a bit pattern.
  /// @param[in] raw the bits.
  /// @return the bf16 with exactly these bits.
  static constexpr bf16 from_bits(std::uint16_t raw) noexcept {
    bf16 h;
    h.bits = raw;
    return h;
  }
  /// @brief The exact value as a float.
  /// @return the float equal to this bf16.
  constexpr explicit operator float() const noexcept { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "16-bit storage types");

}  // namespace dtl::nn
