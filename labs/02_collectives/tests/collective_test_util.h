// What lab 02's tests share beyond harness/testing/collective_checks.h (element
// types, integer-valued data, the tracer checks): the counts and roots they sweep.
//
// The oracle is always the vendor's collective (MPI_Bcast, MPI_Reduce, ...),
// called by the test *after* the tracer's counts of the code under test were
// taken, so that the vendor's own calls are never held against it.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"
#include "lab02/collectives.h"

namespace lab02_test {

using namespace dtl::testing;  // comm(), values(), traced(), no_vendor_collective(), ...

/// The counts every correctness test sweeps: empty, one element, fewer than the
/// ranks, not divisible by the ranks, large (past every eager limit).
inline std::vector<std::size_t> sweep_counts() {
  const std::size_t p = static_cast<std::size_t>(comm().size());
  return {0, 1, p - 1, 7 * p + 3, 100003};
}

/// "float, root 2, count 31": the case, for failure messages.
inline std::string case_name(const std::string& type, int root, std::size_t count) {
  return type + (root >= 0 ? ", root " + std::to_string(root) : std::string()) + ", count " + std::to_string(count);
}

/// ceil(log2 p): the rounds of a binomial tree on p ranks.
inline int ceil_log2(int p) {
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  return rounds;
}

}  // namespace lab02_test
