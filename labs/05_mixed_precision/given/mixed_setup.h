// Lab 05, given (not a task): helpers of your files in src/. The 16-bit bit
// conversions of one element (half_reduce.cc), and the trainer's scaler (the
// hook's or task B's LossScaler, mixed_trainer.cc). Defined here and in
// given/mixed_setup.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab05/mixed.h"

namespace dtl::lab05 {

/// @throws dtl::InvalidArgument naming `function` unless `dtype` is f16 or bf16.
inline void require_half(DType dtype, const char* function) {
  DTL_REQUIRE_ARG(dtype == DType::kF16 || dtype == DType::kBF16, function, "dtype",
                  std::string("is ") + dtype_name(dtype) + "; only f16 and bf16 are 16-bit floats");
}

/// One 16-bit element of `dtype` (f16 or bf16 bits), widened exactly to float.
inline float widen(DType dtype, std::uint16_t bits) {
  return dtype == DType::kF16 ? nn::f16_bits_to_float(bits) : nn::bf16_bits_to_float(bits);
}

/// A float rounded once to a 16-bit element of `dtype` (f16 or bf16 bits).
inline std::uint16_t narrow(DType dtype, float value) {
  return dtype == DType::kF16 ? nn::float_to_f16_bits(value) : nn::float_to_bf16_bits(value);
}

/// The trainer's scaler: options.hooks.make_scaler's (the grading tests' oracle) if
/// set, else the LossScaler of task B.
/// @throws dtl::InvalidArgument if the hook returns null.
std::unique_ptr<LossScaler> make_scaler(const MixedOptions& options);

}  // namespace dtl::lab05
