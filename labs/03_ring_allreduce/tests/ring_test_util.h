// What lab 03's tests share beyond harness/testing/collective_checks.h: the
// counts they sweep, the vendor oracles with the ring's chunk layout, and the
// closed forms of what a bandwidth-optimal ring sends.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"
#include "lab03/ring.h"

namespace lab03_test {

using namespace dtl::testing;  // comm(), values(), traced(), no_vendor_collective(), ...
using dtl::lab03::chunk_begin;
using dtl::lab03::chunk_count;
using dtl::ReduceOp;

/// Empty, one element, fewer than the ranks, one more than the ranks, not
/// divisible by the ranks, past every eager limit; `large` adds 4 MiB of floats.
inline std::vector<std::size_t> sweep_counts(bool large = false) {
  const std::size_t p = static_cast<std::size_t>(comm().size());
  std::vector<std::size_t> counts = {0, 1, p - 1, p + 1, 7 * p + 3, 100003};
  if (large) counts.push_back((std::size_t{1} << 20) + 3);
  return counts;
}

/// "allreduce_ring, float, sum, count 31": the case, for failure messages.
inline std::string case_name(const std::string& function, const std::string& type, ReduceOp op, std::size_t count) {
  return function + ", " + type + ", " + (op == ReduceOp::kSum ? "sum" : "avg") + ", count " + std::to_string(count);
}

/// The element counts of the P chunks of a `count`-element buffer (ring.h's layout).
inline std::vector<int> chunk_counts(std::size_t count) {
  std::vector<int> counts;
  for (int c = 0; c < comm().size(); ++c) counts.push_back(static_cast<int>(chunk_count(count, comm().size(), c)));
  return counts;
}

/// The oracle: MPI_Allreduce's sum of `mine`, divided by P afterwards for ReduceOp::kAvg
/// (C++ division: what "divide once, at the end" gives, truncating for integers).
template <typename T>
std::vector<T> vendor_allreduce(const std::vector<T>& mine, ReduceOp op) {
  std::vector<T> sum(mine.size());
  DTL_MPI_CHECK(MPI_Allreduce(mine.data(), sum.data(), static_cast<int>(mine.size()), dtl::mpi_datatype<T>(), MPI_SUM,
                              comm()));
  if (op == ReduceOp::kAvg) {
    for (T& x : sum) x /= static_cast<T>(comm().size());
  }
  return sum;
}

/// Elements a bandwidth-optimal reduce-scatter sends from this rank: all but its own chunk.
inline std::int64_t reduce_scatter_elements(std::size_t count) {
  return static_cast<std::int64_t>(count - chunk_count(count, comm().size(), comm().rank()));
}

/// Elements a bandwidth-optimal allgather sends from this rank: all but the chunk
/// of its right neighbour (the one chunk it never needs to pass on).
inline std::int64_t allgather_elements(std::size_t count) {
  const int right = (comm().rank() + 1) % comm().size();
  return static_cast<std::int64_t>(count - chunk_count(count, comm().size(), right));
}

/// Success if the code under test used only nonblocking point-to-point calls
/// (MPI_Isend, MPI_Irecv, MPI_Wait*, MPI_Test*): the segmented ring's contract.
inline ::testing::AssertionResult only_nonblocking(const dtl::trace::Counts& counts, const std::string& what) {
  for (const char* name : {"MPI_Send", "MPI_Ssend", "MPI_Bsend", "MPI_Rsend", "MPI_Recv", "MPI_Sendrecv",
                           "MPI_Sendrecv_replace"}) {
    if (counts.count(name) > 0) {
      return ::testing::AssertionFailure()
             << "rank " << comm().rank() << ": " << what << " called the blocking " << name
             << "; the segmented ring posts MPI_Isend/MPI_Irecv and waits, so that sending one segment "
                "overlaps adding the next";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lab03_test
