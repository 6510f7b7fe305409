// What every .cu file in kernels/ shares: the launch shape of a grid-stride
// loop, and scratch memory on the device that is reused from call to call.
// Internal to kernels/*.cu (nvcc only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dtl::nn::kernels {

/// Threads per block of the elementwise kernels: a multiple of the warp (32),
/// enough to hide memory latency with a few blocks per SM.
inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `count` items, capped: a grid-stride
/// loop covers any count with a fixed grid (lab 03's reduce-copy explains why).
inline int blocks_for(std::int64_t count, int threads = kThreads) {
  const std::int64_t b = (count + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b < 8192 ? b : 8192));
}

/// @brief `bytes` of device memory, slot `slot` of the calling thread's scratch.
///
/// Grows and never shrinks, so steady-state training allocates nothing; charged
/// to MemoryCategory::kActivations on memory_tracker(Device::kCuda), like the
/// activations it holds for a moment. Growing frees the old block (cudaFree
/// waits for the work queued on it first). Slots are separate buffers that one
/// op uses at once.
/// @param[in] slot 0 .. 7.
/// @param[in] bytes at least this many.
/// @return the device pointer (256-byte aligned, from cudaMalloc).
void* scratch(int slot, std::size_t bytes);

}  // namespace dtl::nn::kernels
