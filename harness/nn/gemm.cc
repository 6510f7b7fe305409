// GEMM on the CPU through OpenBLAS's CBLAS interface, row-major.
#include "harness/nn/gemm.h"

#include <cblas.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "harness/error.h"

namespace dtl::nn {

namespace {

std::once_flag g_threads_once;
bool g_threads_set = false;

// One thread per rank unless told otherwise. Runs once, before the first GEMM.
void apply_default_threads() {
  std::call_once(g_threads_once, [] {
    if (g_threads_set) return;
    int threads = 1;
    if (const char* env = std::getenv("DTL_GEMM_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) threads = n;
    }
    openblas_set_num_threads(threads);
  });
}

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no products: C = beta * C (BLAS rejects a zero leading dimension)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  apply_default_threads();
  cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb),
              beta, c, static_cast<blasint>(ldc));
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
    return;
  }
  apply_default_threads();
  cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb),
              beta, c, static_cast<blasint>(ldc));
}

void set_gemm_threads(int threads) {
  DTL_REQUIRE_ARG(threads >= 1, "set_gemm_threads", "threads", "must be at least 1, not " + std::to_string(threads));
  g_threads_set = true;
  apply_default_threads();  // consume the once-flag so the default never overrides this
  openblas_set_num_threads(threads);
}

int gemm_threads() {
  apply_default_threads();
  return openblas_get_num_threads();
}

}  // namespace dtl::nn
