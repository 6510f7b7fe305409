// The CUDA path: cuBLAS for GEMM, one grid-stride kernel per elementwise op.
// Correct by construction and compiled everywhere; run and checked against
// the CPU layers only where a GPU is present (tests/nn_gpu_test.cc).
#include "harness/nn/cuda_ops.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "harness/cuda/check.h"
#include "harness/error.h"
#include "harness/nn/kernels/half_math.cuh"

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
// opened with dlopen the first time a GEMM runs on the GPU, and the six
// functions used here are looked up by name; a process that never runs a GPU
// GEMM never loads it. The library is found like any other (LD_LIBRARY_PATH,
// the binary's run path), then in the toolkit this was built with.
// cublasGemmEx is overloaded in C++ (an inline wrapper takes the old cudaDataType
// compute type): the pointer type of the library's own function, spelled out.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  decltype(&cublasCreate) create;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  GemmExFn gemm_ex;
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
                  symbol<GemmExFn>(lib, "cublasGemmEx"),
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
    out[i] = kernels::f32_to_f16_rne(in[i]);
  }
}

__global__ void float_to_bf16_kernel(std::uint16_t* out, const float* in, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    out[i] = kernels::f32_to_bf16_rne(in[i]);
  }
}

__global__ void half_sum_kernel(int kind, const std::uint16_t* in, std::uint16_t* inout, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    inout[i] = kernels::half_sum(kind, inout[i], in[i]);
  }
}

// Each thread remembers whether it saw an inf or NaN and writes the flag once, at
// the end: a plain store of 1 from any number of threads is a benign race (all
// write the same value), no atomics needed.
__global__ void unscale_16_kernel(int kind, float* out, const std::uint16_t* grads, float inv_scale,
                                  std::int64_t count, int* found_inf) {
  bool found = false;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = kernels::unscale16(kind, grads[i], inv_scale);
    out[i] = v;
    found = found || !isfinite(v);
  }
  if (found) *found_inf = 1;
}

int half_kind(DType dtype, const char* function) {
  DTL_REQUIRE_ARG(dtype == DType::kF16 || dtype == DType::kBF16, function, "dtype",
                  std::string("is ") + dtype_name(dtype) + "; only f16 and bf16 are 16-bit floats");
  return dtype == DType::kF16 ? kernels::kF16Kind : kernels::kBF16Kind;
}

cudaDataType cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
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

void gemm_16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
             std::int64_t lda, const void* b, std::int64_t ldb, DType ab_dtype, float beta, void* c, std::int64_t ldc,
             DType c_dtype, cudaStream_t stream) {
  half_kind(ab_dtype, "gemm_16");
  DTL_REQUIRE_ARG(c_dtype == DType::kF32 || c_dtype == ab_dtype, "gemm_16", "c_dtype",
                  std::string("is ") + dtype_name(c_dtype) + "; C is f32 or " + dtype_name(ab_dtype) + " like A and B");
  if (m == 0 || n == 0) return;
  cublas_check(cublas().set_stream(handle(), stream), "cublasSetStream");
  // The operand swap of gemm(); alpha and beta are floats because the compute type is fp32.
  cublas_check(cublas().gemm_ex(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                cuda_type(ab_dtype), static_cast<int>(ldb), a, cuda_type(ab_dtype),
                                static_cast<int>(lda), &beta, c, cuda_type(c_dtype), static_cast<int>(ldc),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void half_sum(DType dtype, const std::uint16_t* in, std::uint16_t* inout, std::int64_t count, cudaStream_t stream) {
  const int kind = half_kind(dtype, "half_sum");
  if (count == 0) return;
  half_sum_kernel<<<blocks_for(count), kThreads, 0, stream>>>(kind, in, inout, count);
  DTL_CUDA_CHECK_LAUNCH();
}

void unscale_16(DType dtype, float* out, const std::uint16_t* grads, float inv_scale, std::int64_t count,
                int* found_inf, cudaStream_t stream) {
  const int kind = half_kind(dtype, "unscale_16");
  if (count == 0) return;
  unscale_16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(kind, out, grads, inv_scale, count, found_inf);
  DTL_CUDA_CHECK_LAUNCH();
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
