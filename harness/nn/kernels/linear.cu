// Linear on the GPU: y = x W^T + b through cuBLAS, and its three gradients.
//
// What this file teaches: a Linear layer is three GEMMs (forward; dW and dx
// backward) and two tiny kernels around them. The bias goes in the way the CPU
// layer puts it in: copy b into every row of y, then let the GEMM accumulate
// onto it (beta = 1), so no second pass over y. The bias gradient is a column
// sum, one thread per column walking down the rows: consecutive threads read
// consecutive addresses (coalesced), and each column is summed in the same
// order as on the CPU, so the two agree to the last bit.
//
// Row-major GEMMs through column-major cuBLAS: see cuda_ops.cu (dtl::nn::cuda::gemm).
// TF32 stays off (cuBLAS's default for cublasSgemm): full fp32 products, so the
// GPU matches the CPU to float rounding.
#include "harness/cuda/check.h"
#include "harness/nn/cuda_ops.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// y (rows, cols) = b (cols) broadcast over rows.
__global__ void fill_rows_kernel(float* y, const float* b, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * cols;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = b[i % cols];
  }
}

// db (cols) += column sums of dy (rows, cols), row 0 first, into db directly as the CPU does.
__global__ void column_sum_kernel(float* db, const float* dy, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < cols;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = db[j];
    for (std::int64_t i = 0; i < rows; ++i) acc += dy[i * cols + j];
    db[j] = acc;
  }
}

}  // namespace

void linear_forward(OnCuda on, float* y, const float* x, const float* w, const float* b, std::int64_t n,
                    std::int64_t in, std::int64_t out) {
  if (n == 0) return;
  if (b != nullptr) {
    fill_rows_kernel<<<blocks_for(n * out), kThreads, 0, on.stream>>>(y, b, n, out);
    DTL_CUDA_CHECK_LAUNCH();
  }
  cuda::gemm(false, true, n, out, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y, out, on.stream);
}

void linear_backward_bias(OnCuda on, float* db, const float* dy, std::int64_t n, std::int64_t out) {
  column_sum_kernel<<<blocks_for(out), kThreads, 0, on.stream>>>(db, dy, n, out);
  DTL_CUDA_CHECK_LAUNCH();
}

void linear_backward_weight(OnCuda on, float* dw, const float* dy, const float* x, std::int64_t n, std::int64_t in,
                            std::int64_t out) {
  if (n == 0) return;  // dW += 0
  cuda::gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in, on.stream);
}

void linear_backward_input(OnCuda on, float* dx, const float* dy, const float* w, std::int64_t n, std::int64_t in,
                           std::int64_t out) {
  cuda::gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, on.stream);
}

}  // namespace dtl::nn::detail
