// Shared by the lab 03 part 2 tests (host and GPU): element types, conversions
// and exact test data. Only where CUDA is built (DTL_LAB_HAS_CUDA).
#pragma once

#if DTL_LAB_HAS_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "harness/testing/mpi_test.h"

namespace lab03_test {

// The element types of part 2; typed tests run once per type.
using GpuTypes = ::testing::Types<float, __half, __nv_bfloat16>;

struct TypeNames {
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, __half>) return "half";
    else return "bfloat16";
  }
};

inline float to_float(float x) { return x; }
inline float to_float(__half x) { return __half2float(x); }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

// The bits of an element, so that comparisons are exact (and -0 differs from +0).
template <typename T>
std::uint32_t bits(T x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

// A small integer in [-16, 16], different per (index, seed): sums of up to 8 of
// them (|sum| <= 128) are exact in float, half (11-bit significand) and bfloat16
// (8 bits), in any order, so ring results can be checked bit for bit.
template <typename T>
T small_int(std::size_t i, int seed) {
  const auto v = static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13 + i / 5) % 33) - 16;
  return from_float<T>(static_cast<float>(v));
}

// The first index where two arrays differ bitwise, as a readable failure.
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& expected, const std::vector<T>& got, const std::string& what) {
  if (expected.size() != got.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, expected " << expected.size();
  }
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (bits(expected[i]) != bits(got[i])) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << wrong << " of " << expected.size()
                                       << " elements differ; first at index " << first << ": expected "
                                       << to_float(expected[first]) << ", got " << to_float(got[first]);
}

// This rank's input (small_int() values of `seed`) and the sum over every rank of the
// test's communicator, by MPI_Allreduce on float copies (exact: small integers).
// Collective.
template <typename T>
struct Inputs {
  std::vector<T> mine, want;
};

template <typename T>
Inputs<T> inputs(std::size_t count, int seed) {
  Inputs<T> in;
  in.mine.resize(count);
  std::vector<float> mine_f(count), sum_f(count);
  for (std::size_t i = 0; i < count; ++i) {
    in.mine[i] = small_int<T>(i, seed);
    mine_f[i] = to_float(in.mine[i]);
  }
  MPI_Allreduce(mine_f.data(), sum_f.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, dtl::testing::comm());
  in.want.resize(count);
  for (std::size_t i = 0; i < count; ++i) in.want[i] = from_float<T>(sum_f[i]);
  return in;
}

}  // namespace lab03_test
#endif  // DTL_LAB_HAS_CUDA
