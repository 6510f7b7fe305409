// Lab 05, given (not a task): the kernels of the device path (mixed_device.h).
// Each kernel is a grid-stride loop over mixed_device_math.h's per-element
// function, queued on the compute stream (Note [The compute stream],
// harness/nn/compute_stream.h): the step stays one ordered queue, and the only
// host waits are the ones that hand a number to the host (the round counts, the
// agreed flag), each said where it happens.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/error.h"
#include "harness/nn/compute_stream.h"
#include "harness/nn/kernels/half_math.cuh"
#include "mixed_device.h"
#include "mixed_device_math.h"

namespace dtl::lab05 {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
}

cudaStream_t stream() { return nn::compute_stream(); }

int kind_of(nn::DType dtype) {
  return dtype == nn::DType::kF16 ? nn::kernels::kF16Kind : dtype == nn::DType::kBF16 ? nn::kernels::kBF16Kind : 0;
}

#define DTL_GRID_STRIDE(i, count)                                                                       \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void divide16_kernel(int kind, std::uint16_t* buf, std::int64_t count, float divisor) {
  DTL_GRID_STRIDE(i, count) buf[i] = device_math::divide16(kind, buf[i], divisor);
}

// kind 0: dst is f32 (a copy). Each thread counts in registers and adds its
// counts once: three atomics per thread, not per element.
__global__ void round_count_kernel(int kind, void* dst, const float* src, std::int64_t count,
                                   unsigned long long* counts) {
  unsigned long long nonzero = 0, underflow = 0, overflow = 0;
  DTL_GRID_STRIDE(i, count) {
    const float v = src[i];
    float rounded = v;
    if (kind == 0) {
      static_cast<float*>(dst)[i] = v;
    } else {
      const std::uint16_t bits = nn::kernels::narrow16(kind, v);
      static_cast<std::uint16_t*>(dst)[i] = bits;
      rounded = nn::kernels::widen16(kind, bits);
    }
    const unsigned c = device_math::round_class(v, rounded);
    nonzero += (c & device_math::kNonzero) != 0u;
    underflow += (c & device_math::kUnderflow) != 0u;
    overflow += (c & device_math::kOverflow) != 0u;
  }
  if (nonzero != 0) atomicAdd(&counts[0], nonzero);
  if (underflow != 0) atomicAdd(&counts[1], underflow);
  if (overflow != 0) atomicAdd(&counts[2], overflow);
}

// As nn::cuda::unscale_16, for any of f16, bf16 and f32 gradients: a thread that
// saw an inf or NaN stores 1 (the same value from every such thread: a benign race).
__global__ void unscale_kernel(int kind, float* out, const void* grads, float inv_scale, std::int64_t count,
                               std::int32_t* flag) {
  bool found = false;
  DTL_GRID_STRIDE(i, count) {
    const float v = kind == 0 ? static_cast<const float*>(grads)[i] * inv_scale
                              : nn::kernels::unscale16(kind, static_cast<const std::uint16_t*>(grads)[i], inv_scale);
    out[i] = v;
    found = found || device_math::not_finite(v);
  }
  if (found) *flag = 1;
}

}  // namespace

bool is_device_pointer(const void* ptr) {
  // Asked once: on a machine without a GPU (CI) every later call answers at once,
  // without the CUDA runtime trying, and failing, to reach a driver again.
  static const bool any_gpu = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();
    return ok;
  }();
  if (ptr == nullptr || !any_gpu) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // no GPU, or not a pointer CUDA knows: host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void divide_half_on_device(DType dtype, void* buf, std::size_t count, float divisor) {
  if (count == 0) return;
  const auto n = static_cast<std::int64_t>(count);
  divide16_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(kind_of(dtype), static_cast<std::uint16_t*>(buf), n,
                                                              divisor);
  DTL_CUDA_CHECK_LAUNCH();
}

RoundStats round_to_half_on_device(const nn::Tensor& dst, const nn::Tensor& src) {
  RoundStats stats;
  stats.count = src.numel();
  if (src.numel() == 0) return stats;
  // Three counters on the device; zeroed, filled by the kernel and read back on
  // the compute stream: the one host wait of the rounding (the counts are what
  // StepResult reports).
  nn::Tensor counts = nn::Tensor::zeros({6}, nn::DType::kI32, nn::MemoryCategory::kOther, nn::Device::kCuda);
  auto* d_counts = static_cast<unsigned long long*>(counts.raw());
  round_count_kernel<<<blocks_for(src.numel()), kThreads, 0, stream()>>>(kind_of(dst.dtype()), dst.raw(),
                                                                          static_cast<const float*>(src.raw()),
                                                                          src.numel(), d_counts);
  DTL_CUDA_CHECK_LAUNCH();
  unsigned long long host[3] = {0, 0, 0};
  cuda::copy(host, d_counts, sizeof host, stream());
  stats.nonzero = static_cast<std::int64_t>(host[0]);
  stats.underflow = static_cast<std::int64_t>(host[1]);
  stats.overflow = static_cast<std::int64_t>(host[2]);
  return stats;
}

void unscale_on_device(const nn::Tensor& grads, const nn::Tensor& out, float inv_scale, const nn::Tensor& flag) {
  if (grads.numel() == 0) return;
  unscale_kernel<<<blocks_for(grads.numel()), kThreads, 0, stream()>>>(
      kind_of(grads.dtype()), static_cast<float*>(out.raw()), grads.raw(), inv_scale, grads.numel(),
      static_cast<std::int32_t*>(flag.raw()));
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::lab05
