/// @file
/// @brief DTL_CUDA_CHECK and DTL_CUDA_CHECK_LAUNCH: CUDA errors as dtl::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "harness/error.h"

/// @brief Evaluates a CUDA runtime call once; throws dtl::CudaError unless it returned cudaSuccess.
#define DTL_CUDA_CHECK(expr)                                                                  \
  do {                                                                                        \
    const cudaError_t dtl_cuda_rc_ = (expr);                                                  \
    if (dtl_cuda_rc_ != cudaSuccess) {                                                        \
      ::dtl::detail::throw_cuda_error(static_cast<int>(dtl_cuda_rc_),                         \
                                      cudaGetErrorName(dtl_cuda_rc_),                         \
                                      cudaGetErrorString(dtl_cuda_rc_), #expr, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

/// @brief Checks a kernel launch: call right after `kernel<<<...>>>(...)`.
#define DTL_CUDA_CHECK_LAUNCH() DTL_CUDA_CHECK(cudaGetLastError())
