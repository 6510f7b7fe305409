// A tiny kernel for the GPU smoke test: y[i] = a * x[i] + y[i].
#include <cuda_runtime.h>

#include "harness/cuda/check.h"

namespace dtl::cuda::test {

__global__ void saxpy_kernel(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

void saxpy(int n, float a, const float* x, float* y) {
  if (n == 0) return;
  saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, x, y);
  DTL_CUDA_CHECK_LAUNCH();
  DTL_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace dtl::cuda::test
