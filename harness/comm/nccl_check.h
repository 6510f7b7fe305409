/// @file
/// @brief DTL_NCCL_CHECK: NCCL errors as dtl::NcclError.
#pragma once

#include <nccl.h>

#include "harness/error.h"

/// @brief Evaluates an NCCL call once; throws dtl::NcclError unless it returned ncclSuccess.
#define DTL_NCCL_CHECK(expr)                                                             \
  do {                                                                                   \
    const ncclResult_t dtl_nccl_rc_ = (expr);                                            \
    if (dtl_nccl_rc_ != ncclSuccess) {                                                   \
      ::dtl::detail::throw_nccl_error(static_cast<int>(dtl_nccl_rc_),                    \
                                      ncclGetErrorString(dtl_nccl_rc_), #expr, __FILE__, \
                                      __LINE__);                                         \
    }                                                                                    \
  } while (0)
