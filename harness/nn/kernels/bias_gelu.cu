// Linear's bias and the GELU after it, fused into one kernel each way.
//
// What this file teaches: fusion saves memory traffic, not arithmetic.
// Note [Fused bias + GELU]: unfused, the MLP's first Linear writes b into
// every row of its output h, the GEMM reads h back and accumulates x W^T onto
// it (beta = 1), and GELU reads h a third time to write g = gelu(h); backward,
// GELU writes dh = gelu'(h) dg and the Linear reads dh once more for the bias
// gradient, a column sum. Fused (what frameworks do, e.g. a cuBLASLt
// GELU_BIAS epilogue or torch.compile's generated kernel):
//
//     forward   GEMM (beta = 0) writes y = x W^T           1 write of (N, 4C)
//               g = gelu(y + b), b in a register           1 read, 1 write
//     backward  dh = gelu'(y + b) dg and db += sum_i dh    1 read of y and dg, 1 write
//               in the same pass, one thread per column
//
// The pre-activation is read once instead of twice forward (no fill pass, no
// re-read by a separate activation kernel), and once backward (the bias
// gradient needs no second read of dh). The pre-activation with its bias is
// never stored: y + b is one addition, recomputed backward where it is needed.
// The layers stay two (`Linear`, `GELU`), with the names and parameters labs
// see: make_mlp_block links them (GELU::fuse_bias_of), and on the GPU the
// Linear leaves its bias to the GELU (forward and gradient); on the CPU both
// run unfused, unchanged. grad_ready(bias) still comes from the Linear, after
// the GELU's backward has queued the bias gradient.
//
// The backward walks each column down the rows in the CPU's order (no
// atomics, the same bits as the CPU's bias gradient for the same dh). Its
// parallelism is the number of columns (4C): enough for the benchmark's
// shapes; a framework would split the rows into blocks and add the partial
// sums in a fixed order, which this leaves out. Math: bias_gelu_math.cuh.
#include "harness/cuda/check.h"
#include "harness/nn/kernels/bias_gelu_math.cuh"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// g (rows, cols) = gelu(y + b), b (cols) broadcast over the rows; a grid-stride loop.
__global__ void bias_gelu_forward_kernel(float* g, const float* y, const float* b, std::int64_t rows,
                                         std::int64_t cols) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * cols;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    g[i] = kernels::bias_gelu(y[i], b[i % cols]);
  }
}

// One thread per column: consecutive threads read consecutive addresses of a row (coalesced).
__global__ void bias_gelu_backward_kernel(float* dh, float* db, const float* y, const float* b, const float* dg,
                                          std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < cols;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    kernels::bias_gelu_backward_column(dh, db, y, b, dg, rows, cols, j);
  }
}

}  // namespace

void bias_gelu_forward(OnCuda on, float* g, const float* y, const float* b, std::int64_t rows, std::int64_t cols) {
  if (rows * cols == 0) return;
  bias_gelu_forward_kernel<<<blocks_for(rows * cols), kThreads, 0, on.stream>>>(g, y, b, rows, cols);
  DTL_CUDA_CHECK_LAUNCH();
}

void bias_gelu_backward(OnCuda on, float* dh, float* db, const float* y, const float* b, const float* dg,
                        std::int64_t rows, std::int64_t cols) {
  if (cols == 0) return;
  bias_gelu_backward_kernel<<<blocks_for(cols), kThreads, 0, on.stream>>>(dh, db, y, b, dg, rows, cols);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
