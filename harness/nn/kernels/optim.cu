// SGD and AdamW steps on the GPU, over a slice of a flat buffer.
//
// What this file teaches: the optimizer is the simplest kernel of a training
// step, one element per thread (optim_math.cuh, shared with the host test),
// and memory-bound: AdamW reads p, g, m, v and writes p, m, v, 28 bytes per
// parameter for about a dozen flops. Fusing the whole step into one kernel
// (PyTorch's "fused" AdamW) is what keeps it at one pass over memory.
//
// Left out: the multi-tensor apply of frameworks (one launch for many separate
// tensors); here the parameters are already one flat buffer.
#include "harness/cuda/check.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"
#include "harness/nn/kernels/optim_math.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

__global__ void sgd_kernel(float* p, const float* g, float* m, std::int64_t count, float lr, float mu, float wd) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    kernels::sgd_update(p + i, m != nullptr ? m + i : nullptr, g[i], lr, mu, wd);
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t count,
                             kernels::AdamWStep s) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    kernels::adamw_update(p + i, m + i, v + i, g[i], s);
  }
}

}  // namespace

void sgd_step(OnCuda on, float* p, const float* g, float* m, std::int64_t count, float lr, float momentum,
              float weight_decay) {
  if (count == 0) return;
  sgd_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(p, g, m, count, lr, momentum, weight_decay);
  DTL_CUDA_CHECK_LAUNCH();
}

void adamw_step(OnCuda on, float* p, const float* g, float* m, float* v, std::int64_t count,
                const kernels::AdamWStep& step) {
  if (count == 0) return;
  adamw_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(p, g, m, v, count, step);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
