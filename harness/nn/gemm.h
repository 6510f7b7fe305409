/// @file
/// @brief GEMM, the one kernel that matters: C = alpha * op(A) * op(B) + beta * C, row-major.
///
/// What this file teaches: almost all of a training step's arithmetic is
/// matrix multiplication (Linear forward and both halves of its backward,
/// the attention projections), so the layers call this one function and it
/// calls OpenBLAS (`cblas_sgemm`/`cblas_dgemm`). A GEMM of (m, k) by (k, n)
/// costs 2*m*n*k floating-point operations.
///
/// Threads: OpenBLAS would start one thread per core; with one MPI rank per
/// core that oversubscribes the machine. The first GEMM therefore sets
/// OpenBLAS to one thread unless set_gemm_threads() was called, or the
/// environment variable DTL_GEMM_THREADS gives another number.
#pragma once

#include <cstdint>

namespace dtl::nn {

/// @brief Row-major C (m, n) = alpha * op(A) * op(B) + beta * C in float.
///
/// op(A) is (m, k): A itself, (m, k) with leading dimension lda, or, when
/// `trans_a`, the transpose of an A stored (k, m). Likewise op(B) is (k, n):
/// B (k, n), or B stored (n, k) when `trans_b`. beta = 0 overwrites C
/// (whatever it held, even NaN); beta = 1 accumulates into it.
/// @param[in] trans_a use A transposed.
/// @param[in] trans_b use B transposed.
/// @param[in] m rows of C.
/// @param[in] n columns of C.
/// @param[in] k the shared dimension.
/// @param[in] alpha scale of the product.
/// @param[in] a A's elements.
/// @param[in] lda A's row stride (elements).
/// @param[in] b B's elements.
/// @param[in] ldb B's row stride.
/// @param[in] beta scale of the old C.
/// @param[in,out] c C's elements.
/// @param[in] ldc C's row stride.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);

/// @brief The same in double (gradient checks).
/// @param[in] trans_a use A transposed.
/// @param[in] trans_b use B transposed.
/// @param[in] m rows of C.
/// @param[in] n columns of C.
/// @param[in] k the shared dimension.
/// @param[in] alpha scale of the product.
/// @param[in] a A's elements.
/// @param[in] lda A's row stride (elements).
/// @param[in] b B's elements.
/// @param[in] ldb B's row stride.
/// @param[in] beta scale of the old C.
/// @param[in,out] c C's elements.
/// @param[in] ldc C's row stride.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc);

/// @brief Sets the number of OpenBLAS threads for all later GEMMs.
/// @param[in] threads at least 1.
/// @throws dtl::InvalidArgument if threads < 1.
void set_gemm_threads(int threads);

/// @brief The number of threads OpenBLAS uses now (after the default has been applied).
/// @return the thread count.
int gemm_threads();

}  // namespace dtl::nn
