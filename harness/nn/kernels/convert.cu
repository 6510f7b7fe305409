// convert() on the GPU: f32 <-> f16 / bf16, one element per thread (lab 05's
// master weights and their half-precision copies, when they live on the GPU).
//
// What this file teaches: the rounding is CUDA's own (__float2half_rn,
// __float2bfloat16_rn: round to nearest, ties to even, overflow to infinity,
// subnormals kept), the same rule half.h implements in portable C++ on the
// CPU; half_test.cc checks the two agree on the host for all 65,536 patterns.
// One difference: CUDA returns the canonical NaN (0x7fff / 0x7fff) where half.h
// keeps the payload, so NaNs compare as "is NaN".
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "harness/cuda/check.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// The element types as CUDA knows them.
__device__ float load(const float* p) { return *p; }
__device__ float load(const __half* p) { return __half2float(*p); }
__device__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    store(dst + i, load(src + i));  // through float: exact for every f16 and bf16
  }
}

template <typename Dst, typename Src>
void launch(void* dst, const void* src, std::int64_t count, CUstream_st* stream) {
  convert_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<Dst*>(dst), static_cast<const Src*>(src),
                                                             count);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool convert_on_gpu(OnCuda on, void* dst, int dst_kind, const void* src, int src_kind, std::int64_t count) {
  if (count == 0) return true;
  // kinds: 0 = f32, 1 = f16, 2 = bf16 (kernels.h)
  switch (dst_kind * 3 + src_kind) {
    case 0 * 3 + 1: launch<float, __half>(dst, src, count, on.stream); return true;
    case 0 * 3 + 2: launch<float, __nv_bfloat16>(dst, src, count, on.stream); return true;
    case 1 * 3 + 0: launch<__half, float>(dst, src, count, on.stream); return true;
    case 2 * 3 + 0: launch<__nv_bfloat16, float>(dst, src, count, on.stream); return true;
    case 1 * 3 + 2: launch<__half, __nv_bfloat16>(dst, src, count, on.stream); return true;
    case 2 * 3 + 1: launch<__nv_bfloat16, __half>(dst, src, count, on.stream); return true;
    default: return false;
  }
}

}  // namespace dtl::nn::detail
