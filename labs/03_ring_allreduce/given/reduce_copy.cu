// Lab 03, task D: the reduce-copy kernel and its launch; the copy kernel it is measured against.
//
// What this file teaches: a kernel that is a thin wrapper. All the work of one
// thread is reduce_copy_thread() (reduce_copy.cuh, tested on the CPU); the kernel
// only says which thread it is and how many there are. What is left to decide
// here is the launch shape:
//
//   threads per block  512: a multiple of the warp (32), large enough that a
//                      block keeps many loads in flight
//   blocks             enough to cover the work, but at most 4 per SM: with 512
//                      threads that is 2048 threads per SM, the most an H100 SM
//                      holds at once; more blocks would only queue, and the
//                      grid-stride loop gives each thread several vectors instead
//   gridDim.y          the job, when several independent reduce-copies (one per
//                      virtual rank) share one launch: reduce_copy_batch()
//
// Every launch is followed by DTL_CUDA_CHECK_LAUNCH(): a bad launch configuration
// is reported there, at the launch, not at some later synchronization.
// Nothing here synchronizes: the caller's stream orders the work.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <span>

#include "harness/cuda/check.h"
#include "lab03/ring_cuda.h"
#include "reduce_copy.cuh"

namespace dtl::lab03 {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;

// The SM count of the current device, asked once per device.
int sm_count() {
  int device = 0;
  DTL_CUDA_CHECK(cudaGetDevice(&device));
  static int cached_device = -1;
  static int cached_sms = 0;
  if (device != cached_device) {
    DTL_CUDA_CHECK(cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  return cached_sms;
}

// Blocks for `count` elements of `element_bytes`: one thread per 16-byte vector,
// capped at kBlocksPerSm per SM (the grid-stride loop does the rest).
unsigned blocks_for(std::size_t count, std::size_t element_bytes) {
  const std::size_t vectors = (count * element_bytes + kVectorBytes - 1) / kVectorBytes;
  const std::size_t wanted = (vectors + kThreads - 1) / kThreads;
  const std::size_t cap = static_cast<std::size_t>(sm_count()) * kBlocksPerSm;
  return static_cast<unsigned>(std::clamp<std::size_t>(wanted, 1, cap));
}

// Up to kMaxBatch independent jobs, passed by value as one kernel argument.
template <typename T>
struct Batch {
  ReduceCopyArgs<T> jobs[kMaxBatch];
};

// reduce_copy_kernel: job blockIdx.y, thread blockIdx.x * blockDim.x + threadIdx.x
// of gridDim.x * blockDim.x. Shapes: each job's buffers are (count,) of T.
template <typename T>
__global__ void reduce_copy_kernel(const Batch<T> batch) {
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t num_threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  detail::reduce_copy_thread(batch.jobs[blockIdx.y], thread, num_threads);
}

// The roofline: the same grid-stride 16-byte loop with nothing to add, on bytes.
__global__ void copy_kernel(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t num_threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t vectors = bytes / kVectorBytes;  // cudaMalloc'd: both 16-byte aligned
  for (std::size_t v = thread; v < vectors; v += num_threads) {
    reinterpret_cast<int4*>(dst)[v] = reinterpret_cast<const int4*>(src)[v];
  }
  for (std::size_t i = vectors * kVectorBytes + thread; i < bytes; i += num_threads) dst[i] = src[i];
}

}  // namespace

template <GpuElement T>
void reduce_copy_batch(std::span<const ReduceCopyArgs<T>> jobs, cudaStream_t stream) {
  for (std::size_t first = 0; first < jobs.size(); first += kMaxBatch) {
    const std::size_t n = std::min<std::size_t>(kMaxBatch, jobs.size() - first);
    Batch<T> batch{};
    std::size_t largest = 0;
    for (std::size_t j = 0; j < n; ++j) {
      batch.jobs[j] = jobs[first + j];
      largest = std::max(largest, jobs[first + j].count);
    }
    if (largest == 0) continue;
    const dim3 grid(blocks_for(largest, sizeof(T)), static_cast<unsigned>(n));
    reduce_copy_kernel<T><<<grid, kThreads, 0, stream>>>(batch);
    DTL_CUDA_CHECK_LAUNCH();
  }
}

template <GpuElement T>
void reduce_copy(const ReduceCopyArgs<T>& args, cudaStream_t stream) {
  reduce_copy_batch<T>(std::span<const ReduceCopyArgs<T>>(&args, 1), stream);
}

void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  copy_kernel<<<blocks_for(bytes, 1), kThreads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                              static_cast<const unsigned char*>(src), bytes);
  DTL_CUDA_CHECK_LAUNCH();
}

template void reduce_copy<float>(const ReduceCopyArgs<float>&, cudaStream_t);
template void reduce_copy<__half>(const ReduceCopyArgs<__half>&, cudaStream_t);
template void reduce_copy<__nv_bfloat16>(const ReduceCopyArgs<__nv_bfloat16>&, cudaStream_t);
template void reduce_copy_batch<float>(std::span<const ReduceCopyArgs<float>>, cudaStream_t);
template void reduce_copy_batch<__half>(std::span<const ReduceCopyArgs<__half>>, cudaStream_t);
template void reduce_copy_batch<__nv_bfloat16>(std::span<const ReduceCopyArgs<__nv_bfloat16>>, cudaStream_t);

}  // namespace dtl::lab03
