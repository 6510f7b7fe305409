// Reductions across the 32 lanes of a warp, for the row kernels (nvcc only).
//
// __shfl_xor_sync(mask, v, k) hands each lane the value of lane (lane XOR k).
// Five rounds with k = 16, 8, 4, 2, 1 (a butterfly) leave every lane holding
// the sum (or maximum) over all 32 lanes: no shared memory, no __syncthreads.
// The full mask says all 32 lanes take part, so a warp must reach these
// calls together (the row kernels give a whole warp one row, and a whole warp
// leaves together when it has none).
#pragma once

#include "harness/nn/kernels/row_math.cuh"

namespace dtl::nn::kernels {

inline constexpr int kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float warp_sum(float v) {
  for (int k = kWarp / 2; k > 0; k /= 2) v += __shfl_xor_sync(kFullMask, v, k);
  return v;
}

__device__ inline double warp_sum(double v) {
  for (int k = kWarp / 2; k > 0; k /= 2) v += __shfl_xor_sync(kFullMask, v, k);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int k = kWarp / 2; k > 0; k /= 2) {
    const float o = __shfl_xor_sync(kFullMask, v, k);
    v = o > v ? o : v;
  }
  return v;
}

__device__ inline MaxArg warp_max_arg(MaxArg m) {
  for (int k = kWarp / 2; k > 0; k /= 2) {
    const MaxArg o{__shfl_xor_sync(kFullMask, m.value, k),
                   static_cast<std::int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(m.index), k))};
    m = max_arg_combine(m, o);
  }
  return m;
}

}  // namespace dtl::nn::kernels
