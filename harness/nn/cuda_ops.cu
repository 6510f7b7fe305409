// The CUDA path: cuBLAS for GEMM, one grid-stride kernel per elementwise op.
// Correct by construction and compiled everywhere; run and checked against
// the CPU layers only where a GPU is present (tests/nn_gpu_test.cc).
#include "harness/nn/cuda_ops.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "harness/cuda/check.h"
#include "harness/error.h"

namespace dtl::nn::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? b : 65535);  // grid-stride loops cover the rest
}

// Note [cuBLAS loaded on first use]
// Every lab binary links dtl::nn, and most of them never touch a GPU. Linking
// libcublas made each of those processes map and relocate cuBLAS and cuBLASLt
// at start: about 210 MB more resident memory and 0.3 s per process (measured
// 2026-11-27 on the CI machine), times 4 to 6 ranks per test. So cuBLAS is
// opened with dlopen the first time a GEMM runs on the GPU, and the five
// functions used here are looked up by name; a process that never runs a GPU
// GEMM never loads it. The library is found like any other (LD_LIBRARY_PATH,
// the binary's run path), then in the toolkit this was built with.
struct Cublas {
  decltype(&cublasCreate) create;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  decltype(&cublasGetStatusString) status_string;
};

template <typename F>
F symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr) {
    ::dtl::detail::throw_cuda_error(-1, "dlsym", dlerror(), name, __FILE__, __LINE__);
  }
  return reinterpret_cast<F>(f);
}

const Cublas& cublas() {
  static const Cublas api = [] {
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen((std::string(DTL_CUBLAS_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      ::dtl::detail::throw_cuda_error(-1, "dlopen", dlerror(), soname.c_str(), __FILE__, __LINE__);
    }
    // The names behind cublas_v2.h's macros (cublasCreate is cublasCreate_v2, ...).
    return Cublas{symbol<decltype(&cublasCreate)>(lib, "cublasCreate_v2"),
                  symbol<decltype(&cublasSetStream)>(lib, "cublasSetStream_v2"),
                  symbol<decltype(&cublasSgemm)>(lib, "cublasSgemm_v2"),
                  symbol<decltype(&cublasSgemmStridedBatched)>(lib, "cublasSgemmStridedBatched"),
                  symbol<decltype(&cublasGetStatusString)>(lib, "cublasGetStatusString")};
  }();
  return api;
}

void cublas_check(cublasStatus_t status, const char* expr) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    ::dtl::detail::throw_cuda_error(static_cast<int>(status), "cublasStatus_t", cublas().status_string(status), expr,
                                    __FILE__, __LINE__);
  }
}

// One cuBLAS handle per thread, created on first use and kept for the process.
cublasHandle_t handle() {
  thread_local cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    cublas_check(cublas().create(&created), "cublasCreate");
    return created;
  }();
  return h;
}

__global__ void add_bias_kernel(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += gridDim.x * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

// One thread per column sums down the rows: simple and deterministic (no atomics).
__global__ void bias_grad_kernel(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < rows; ++i) sum += dy[i * cols + j];
    dbias[j] += sum;
  }
}

__global__ void relu_forward_kernel(float* y, const float* x, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void relu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void gelu_forward_kernel(float* y, const float* x, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluScale * (v + 0.044715f * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float v = x[i];
    const float th = tanhf(kGeluScale * (v + 0.044715f * v * v * v));
    const float grad =
        0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = grad * dy[i];
  }
}

__global__ void float_to_f16_kernel(std::uint16_t* out, const float* in, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    out[i] = __half_as_ushort(__float2half_rn(in[i]));
  }
}

__global__ void float_to_bf16_kernel(std::uint16_t* out, const float* in, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
          cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  cublas_check(cublas().set_stream(handle(), stream), "cublasSetStream");
  // cuBLAS is column-major. A row-major (m, n) C is a column-major (n, m) C^T,
  // and C^T = op(B)^T op(A)^T: swap the operands, keep each one's transpose flag.
  cublas_check(cublas().sgemm(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                           static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
               "cublasSgemm");
}

void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                          const float* a, std::int64_t lda, std::int64_t stride_a, const float* b, std::int64_t ldb,
                          std::int64_t stride_b, float beta, float* c, std::int64_t ldc, std::int64_t stride_c,
                          std::int64_t batch, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  cublas_check(cublas().set_stream(handle(), stream), "cublasSetStream");
  // The same operand swap as gemm() above, batch by batch.
  cublas_check(cublas().sgemm_strided_batched(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                         static_cast<int>(k), &alpha, b, static_cast<int>(ldb), stride_b, a,
                                         static_cast<int>(lda), stride_a, &beta, c, static_cast<int>(ldc), stride_c,
                                         static_cast<int>(batch)),
               "cublasSgemmStridedBatched");
}

void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  DTL_CUDA_CHECK_LAUNCH();
}

void bias_grad(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  bias_grad_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(dbias, dy, rows, cols);
  DTL_CUDA_CHECK_LAUNCH();
}

void relu_forward(float* y, const float* x, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  relu_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(y, x, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void relu_backward(float* dx, const float* x, const float* dy, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dx, x, dy, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void gelu_forward(float* y, const float* x, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(y, x, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dx, const float* x, const float* dy, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dx, x, dy, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void float_to_f16(std::uint16_t* out, const float* in, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  float_to_f16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, in, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void float_to_bf16(std::uint16_t* out, const float* in, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  float_to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, in, count);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::cuda
