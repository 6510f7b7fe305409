// Where each head's numbers live: the index map between qkv's (B, T, 3C) layout
// and the head-major (B, NH, T, hs) layout the batched GEMMs of attention.cu
// want. Written once for the GPU and the host (tests/kernels_host_test.cc runs
// the whole GPU algorithm on the host with it and compares with the CPU layer).
#pragma once

#include <cstdint>

#include "harness/nn/kernels/elementwise_math.cuh"  // DTL_NN_HD

namespace dtl::nn::kernels {

/// @brief The sizes of one attention problem: B, T, NH and hs = C / NH.
struct HeadDims {
  std::int64_t batch;  ///< B
  std::int64_t seq;    ///< T
  std::int64_t heads;  ///< NH
  std::int64_t hs;     ///< C / NH
  /// @brief Elements of one head-major tensor.
  /// @return B NH T hs = B T C.
  DTL_NN_HD std::int64_t count() const { return batch * heads * seq * hs; }
};

/// @brief Element i of a head-major (B, NH, T, hs) tensor is element head_source(i, ...) of
/// a (B, T, row) tensor whose heads start at column `first` (0, C or 2C for q, k, v in qkv).
DTL_NN_HD inline std::int64_t head_source(std::int64_t i, std::int64_t row, std::int64_t first, HeadDims d) {
  const std::int64_t x = i % d.hs;                // position within the head
  const std::int64_t t = (i / d.hs) % d.seq;      // time
  const std::int64_t bh = i / (d.hs * d.seq);     // which (batch, head) problem
  const std::int64_t b = bh / d.heads, h = bh % d.heads;
  return (b * d.seq + t) * row + first + h * d.hs + x;
}

}  // namespace dtl::nn::kernels
