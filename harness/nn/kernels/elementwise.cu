// ReLU, GELU (forward and backward) and the residual sum on the GPU.
//
// What this file teaches: an elementwise kernel is the per-element function
// (elementwise_math.cuh, tested on the host) inside a grid-stride loop. Each
// thread reads one or two floats and writes one: these kernels do almost no
// arithmetic, so their time is bytes moved / memory bandwidth, the copy
// roofline of lab 03. Launched on the compute stream, checked, never waited for.
//
// Left out: vectorized 16-byte loads (lab 03 shows them), and fusing the
// activation into the GEMM that produces its input (cuBLASLt epilogues): the
// layers are separate here, so the input goes through memory once more.
#include "harness/cuda/check.h"
#include "harness/nn/kernels/elementwise_math.cuh"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// The grid-stride loop: thread t handles elements t, t + stride, t + 2 stride, ...
#define DTL_NN_GRID_STRIDE(i, count) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void relu_forward_kernel(float* y, const float* x, std::int64_t count) {
  DTL_NN_GRID_STRIDE(i, count) y[i] = kernels::relu(x[i]);
}

__global__ void relu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t count) {
  DTL_NN_GRID_STRIDE(i, count) dx[i] = kernels::relu_backward(x[i], dy[i]);
}

__global__ void gelu_forward_kernel(float* y, const float* x, std::int64_t count) {
  DTL_NN_GRID_STRIDE(i, count) y[i] = kernels::gelu(x[i]);
}

__global__ void gelu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t count) {
  DTL_NN_GRID_STRIDE(i, count) dx[i] = kernels::gelu_backward(x[i], dy[i]);
}

__global__ void add_kernel(float* y, const float* a, const float* b, std::int64_t count) {
  DTL_NN_GRID_STRIDE(i, count) y[i] = a[i] + b[i];
}

#undef DTL_NN_GRID_STRIDE

}  // namespace

void relu_forward(OnCuda on, float* y, const float* x, std::int64_t count) {
  if (count == 0) return;
  relu_forward_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(y, x, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void relu_backward(OnCuda on, float* dx, const float* x, const float* dy, std::int64_t count) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(dx, x, dy, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void gelu_forward(OnCuda on, float* y, const float* x, std::int64_t count) {
  if (count == 0) return;
  gelu_forward_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(y, x, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void gelu_backward(OnCuda on, float* dx, const float* x, const float* dy, std::int64_t count) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(dx, x, dy, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void add(OnCuda on, float* y, const float* a, const float* b, std::int64_t count) {
  if (count == 0) return;
  add_kernel<<<blocks_for(count), kThreads, 0, on.stream>>>(y, a, b, count);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
