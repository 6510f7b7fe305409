// convert() on the GPU: f32 <-> f16 / bf16, one element per thread (lab 05's
// master weights and their half-precision copies, when they live on the GPU).
//
// What this file teaches: a conversion kernel is memory-bound (4 + 2 bytes per
// element), so the rounding can be written out in integer and float steps
// (half_math.cuh) instead of CUDA's intrinsics (__float2half_rn,
// __float2bfloat16_rn) at no measurable cost, and then it is the same function
// that the host tests check against the CPU's half.h, bit for bit: round to
// nearest, ties to even, overflow to infinity, subnormals kept, and NaN
// payloads kept (where CUDA's intrinsics return the canonical NaN 0x7fff).
#include <cstdint>

#include "harness/cuda/check.h"
#include "harness/nn/kernels/half_math.cuh"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// The element types, as raw bits: the rounding is half_math.cuh's.
struct F16 {
  std::uint16_t bits;
};
struct BF16 {
  std::uint16_t bits;
};
__device__ float load(const float* p) { return *p; }
__device__ float load(const F16* p) { return kernels::f16_to_f32(p->bits); }
__device__ float load(const BF16* p) { return kernels::bf16_to_f32(p->bits); }
__device__ void store(float* p, float v) { *p = v; }
__device__ void store(F16* p, float v) { p->bits = kernels::f32_to_f16_rne(v); }
__device__ void store(BF16* p, float v) { p->bits = kernels::f32_to_bf16_rne(v); }

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
    case 0 * 3 + 1: launch<float, F16>(dst, src, count, on.stream); return true;
    case 0 * 3 + 2: launch<float, BF16>(dst, src, count, on.stream); return true;
    case 1 * 3 + 0: launch<F16, float>(dst, src, count, on.stream); return true;
    case 2 * 3 + 0: launch<BF16, float>(dst, src, count, on.stream); return true;
    case 1 * 3 + 2: launch<F16, BF16>(dst, src, count, on.stream); return true;
    case 2 * 3 + 1: launch<BF16, F16>(dst, src, count, on.stream); return true;
    default: return false;
  }
}

}  // namespace dtl::nn::detail
