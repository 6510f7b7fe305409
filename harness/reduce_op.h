/// @file
/// @brief ReduceOp: the one reduction vocabulary of the tree, for the harness's
/// communicators and the labs' own collectives alike.
#pragma once

#include <initializer_list>
#include <string>

#include "harness/error.h"

namespace dtl {

/// @brief What a reducing collective computes, element-wise over the ranks.
///
/// Each collective says which it takes: the Communicator backends take kSum and
/// kAvg (what data-parallel training needs); lab 02's reduce() takes kSum, kMax
/// and kMin; lab 03's ring takes kSum and kAvg. Anything else is refused with
/// dtl::InvalidArgument naming `op`.
enum class ReduceOp {
  kSum,  ///< x_0 + x_1 + ... + x_{P-1}
  kAvg,  ///< the sum divided by P once, at the end (integers truncate toward zero, as C++ `/`)
  kMax,  ///< the largest x_r
  kMin,  ///< the smallest x_r
};

/// @brief The reduction's name.
/// @param[in] op the reduction.
/// @return "sum", "avg", "max" or "min" ("?" for a value outside the enum).
constexpr const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

/// @brief Refuses a reduction that a collective does not compute.
/// @param[in] function the collective, named in the error.
/// @param[in] op the reduction asked for.
/// @param[in] allowed the reductions `function` computes.
/// @throws InvalidArgument naming `function`, `op`, what it takes and the rank, unless `op` is in `allowed`.
inline void require_op(const char* function, ReduceOp op, std::initializer_list<ReduceOp> allowed) {
  std::string takes;
  for (ReduceOp a : allowed) {
    if (a == op) return;
    takes += (takes.empty() ? "" : ", ") + std::string(reduce_op_name(a));
  }
  throw_invalid_argument(function, "op", std::string("is ") + reduce_op_name(op) + "; it takes " + takes);
}

}  // namespace dtl
