/// @file
/// @brief The CUDA building blocks of the training core: cuBLAS GEMM and small kernels.
///
/// What this file teaches: on a GPU the same step is a GEMM library call plus
/// a handful of tiny elementwise kernels (bias add, activation forward and
/// backward, the bias gradient as a column sum, fp16/bf16 conversion). These
/// take device pointers and run on `stream`; each launch is checked. The CPU
/// layers in layers.h are the reference each kernel is tested against
/// (tests/nn_gpu_test.cc, skipped without a GPU).
///
/// Built only where nvcc is found (DTL_HAVE_CUDA), into dtl::nn (dtl::nn_cuda is an alias).
/// The layers' own GPU kernels are in kernels/ (see kernels/kernels.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "harness/dtype.h"

namespace dtl::nn::cuda {

/// @brief Row-major C (m, n) = alpha op(A) op(B) + beta C with cuBLAS (see dtl::nn::gemm for the shapes).
/// @param[in] trans_a use A transposed (A stored (k, m)).
/// @param[in] trans_b use B transposed (B stored (n, k)).
/// @param[in] m rows of C.
/// @param[in] n columns of C.
/// @param[in] k the shared dimension.
/// @param[in] alpha scale of the product.
/// @param[in] a device pointer to A.
/// @param[in] lda A's row stride.
/// @param[in] b device pointer to B.
/// @param[in] ldb B's row stride.
/// @param[in] beta scale of the old C.
/// @param[in,out] c device pointer to C.
/// @param[in] ldc C's row stride.
/// @param[in] stream the stream to run on.
/// @throws dtl::CudaError if cuBLAS fails.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
          cudaStream_t stream = nullptr);

/// @brief `batch` row-major GEMMs at once: C_i = alpha op(A_i) op(B_i) + beta C_i, where
/// X_i starts `stride_x` elements after X_{i-1} (cublasSgemmStridedBatched).
///
/// One call for all heads of attention: the (B, NH) matrices of q, k, v lie one
/// after another, so one launch does all B*NH products. Shapes as for gemm().
/// @param[in] trans_a use each A transposed.
/// @param[in] trans_b use each B transposed.
/// @param[in] m rows of each C.
/// @param[in] n columns of each C.
/// @param[in] k the shared dimension.
/// @param[in] alpha scale of the products.
/// @param[in] a device pointer to A_0.
/// @param[in] lda each A's row stride.
/// @param[in] stride_a elements from A_i to A_{i+1}.
/// @param[in] b device pointer to B_0.
/// @param[in] ldb each B's row stride.
/// @param[in] stride_b elements from B_i to B_{i+1}.
/// @param[in] beta scale of the old C.
/// @param[in,out] c device pointer to C_0.
/// @param[in] ldc each C's row stride.
/// @param[in] stride_c elements from C_i to C_{i+1} (the C_i must not overlap).
/// @param[in] batch how many products.
/// @param[in] stream the stream to run on.
/// @throws dtl::CudaError if cuBLAS fails.
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                          const float* a, std::int64_t lda, std::int64_t stride_a, const float* b, std::int64_t ldb,
                          std::int64_t stride_b, float beta, float* c, std::int64_t ldc, std::int64_t stride_c,
                          std::int64_t batch, cudaStream_t stream = nullptr);

/// @brief Row-major C (m, n) = alpha op(A) op(B) + beta C with A and B in 16 bits (f16 or
/// bf16) and every sum in fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F; tensor cores on sm_70+).
///
/// Lab 05's compute in 16 bits: weights and activations stored in half the bytes,
/// the arithmetic still exact where it matters. The product of two fp16 values
/// has at most 22 significant bits (11 + 11), of two bf16 values 16 (8 + 8): each
/// fits fp32's 24 exactly, so the only roundings are the fp32 additions (and the
/// final round to 16 bits when C is 16-bit) — the same result as an fp32 GEMM of
/// the inputs widened to fp32, up to the order of the sums (nn_gpu_test checks
/// that). Accumulating in 16 bits instead would round every partial sum to 11
/// or 8 bits, which is why frameworks never do it for training.
/// Shapes as for gemm(); a, b hold 16-bit elements of `ab_dtype`, c elements of `c_dtype`.
/// @param[in] trans_a use A transposed.
/// @param[in] trans_b use B transposed.
/// @param[in] m rows of C.
/// @param[in] n columns of C.
/// @param[in] k the shared dimension.
/// @param[in] alpha scale of the product (fp32).
/// @param[in] a device pointer to A.
/// @param[in] lda A's row stride.
/// @param[in] b device pointer to B.
/// @param[in] ldb B's row stride.
/// @param[in] ab_dtype DType::kF16 or DType::kBF16, for both A and B.
/// @param[in] beta scale of the old C (fp32).
/// @param[in,out] c device pointer to C.
/// @param[in] ldc C's row stride.
/// @param[in] c_dtype DType::kF32 or ab_dtype.
/// @param[in] stream the stream to run on.
/// @throws dtl::InvalidArgument for another dtype; dtl::CudaError if cuBLAS fails.
void gemm_16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
             std::int64_t lda, const void* b, std::int64_t ldb, DType ab_dtype, float beta, void* c, std::int64_t ldc,
             DType c_dtype, cudaStream_t stream = nullptr);

/// @brief Lab 05's 16-bit sum (reduce_half_sum) on the GPU: inout[i] = round(inout[i] + in[i]),
/// the two 16-bit values added exactly in fp32 and rounded once (kernels/half_math.cuh).
/// @param[in] dtype DType::kF16 or DType::kBF16.
/// @param[in] in device pointer to `count` 16-bit patterns.
/// @param[in,out] inout device pointer to `count` 16-bit patterns.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::InvalidArgument for another dtype; dtl::CudaError if the launch fails.
void half_sum(DType dtype, const std::uint16_t* in, std::uint16_t* inout, std::int64_t count,
              cudaStream_t stream = nullptr);

/// @brief Lab 05's unscale on the GPU: out[i] = widen(grads[i]) * inv_scale in fp32, and
/// *found_inf = 1 if any out[i] is inf or NaN (left as it was otherwise: zero it first).
/// @param[in] dtype DType::kF16 or DType::kBF16.
/// @param[out] out device pointer to `count` floats.
/// @param[in] grads device pointer to `count` 16-bit patterns (the scaled gradients).
/// @param[in] inv_scale 1 / S.
/// @param[in] count elements.
/// @param[in,out] found_inf device pointer to one int.
/// @param[in] stream the stream.
/// @throws dtl::InvalidArgument for another dtype; dtl::CudaError if the launch fails.
void unscale_16(DType dtype, float* out, const std::uint16_t* grads, float inv_scale, std::int64_t count,
                int* found_inf, cudaStream_t stream = nullptr);

/// @brief y (rows, cols) += bias (cols), broadcast over rows.
/// @param[in,out] y device pointer.
/// @param[in] bias device pointer.
/// @param[in] rows N.
/// @param[in] cols out.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream = nullptr);

/// @brief dbias (cols) += sum over rows of dy (rows, cols).
/// @param[in,out] dbias device pointer.
/// @param[in] dy device pointer.
/// @param[in] rows N.
/// @param[in] cols out.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void bias_grad(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols, cudaStream_t stream = nullptr);

/// @brief y = max(x, 0), elementwise over `count` elements.
/// @param[out] y device pointer.
/// @param[in] x device pointer.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void relu_forward(float* y, const float* x, std::int64_t count, cudaStream_t stream = nullptr);

/// @brief dx = dy where x > 0, else 0.
/// @param[out] dx device pointer.
/// @param[in] x device pointer (the forward input).
/// @param[in] dy device pointer.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void relu_backward(float* dx, const float* x, const float* dy, std::int64_t count, cudaStream_t stream = nullptr);

/// @brief y = gelu(x) (tanh approximation), elementwise.
/// @param[out] y device pointer.
/// @param[in] x device pointer.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void gelu_forward(float* y, const float* x, std::int64_t count, cudaStream_t stream = nullptr);

/// @brief dx = gelu'(x) dy.
/// @param[out] dx device pointer.
/// @param[in] x device pointer (the forward input).
/// @param[in] dy device pointer.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void gelu_backward(float* dx, const float* x, const float* dy, std::int64_t count, cudaStream_t stream = nullptr);

/// @brief Rounds floats to fp16 bits (round to nearest even; kernels/half_math.cuh, as convert()), elementwise.
/// @param[out] out device pointer to `count` uint16 fp16 patterns.
/// @param[in] in device pointer to `count` floats.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void float_to_f16(std::uint16_t* out, const float* in, std::int64_t count, cudaStream_t stream = nullptr);

/// @brief Rounds floats to bf16 bits (round to nearest even; kernels/half_math.cuh, as convert()), elementwise.
/// @param[out] out device pointer to `count` uint16 bf16 patterns.
/// @param[in] in device pointer to `count` floats.
/// @param[in] count elements.
/// @param[in] stream the stream.
/// @throws dtl::CudaError if the launch fails.
void float_to_bf16(std::uint16_t* out, const float* in, std::int64_t count, cudaStream_t stream = nullptr);

}  // namespace dtl::nn::cuda
