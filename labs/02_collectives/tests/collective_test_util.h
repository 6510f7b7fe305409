// What every lab 02 test does, once: sweep the element types, the counts and the
// roots; make integer-valued data; run the code under test with the tracer's
// counters reset; prove that it called no vendor collective; check the tag; sum
// a count over the ranks; stop a sweep after its first failing case.
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

#include "harness/comm/mpi.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "lab02/collectives.h"

namespace lab02_test {

using dtl::testing::comm;

/// Calls `check(std::type_identity<T>{})` for each element type of the lab. In the
/// lambda, `using T = typename decltype(type)::type;` names the type.
template <typename F>
void for_each_type(F&& check) {
  check(std::type_identity<float>{});
  check(std::type_identity<double>{});
  check(std::type_identity<std::int32_t>{});
}

/// The element type's name for failure messages.
template <typename T>
std::string type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else return "int32";
}

/// The counts every correctness test sweeps: empty, one element, fewer than the
/// ranks, not divisible by the ranks, large (past every eager limit).
inline std::vector<std::size_t> sweep_counts() {
  const std::size_t p = static_cast<std::size_t>(comm().size());
  return {0, 1, p - 1, 7 * p + 3, 100003};
}

/// `n` integer values in [-125, 125] that differ with `seed` (use the rank): sums
/// of up to 8 of them are exact in float, so any summation order gives the same bits.
template <typename T>
std::vector<T> values(std::size_t n, int seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<T>(static_cast<int>((i * 131 + static_cast<std::size_t>(seed) * 37 + 1) % 251) - 125);
  }
  return v;
}

/// "float, root 2, count 31": the case, for failure messages.
inline std::string case_name(const std::string& type, int root, std::size_t count) {
  return type + (root >= 0 ? ", root " + std::to_string(root) : std::string()) + ", count " + std::to_string(count);
}

/// Runs `call` (the code under test) with the tracer's counters reset right before.
/// @return this rank's counts of what `call` did.
template <typename F>
dtl::trace::Counts traced(F&& call) {
  dtl::trace::reset_counts();
  call();
  return dtl::trace::counts();
}

/// The vendor collectives a lab 02 function must not call (the blocking ones, their
/// nonblocking I-forms, and the scans); every one of them is traced.
inline const std::vector<std::string>& vendor_collectives() {
  static const std::vector<std::string> names = {
      "MPI_Bcast",     "MPI_Ibcast",      "MPI_Scatter",   "MPI_Scatterv",   "MPI_Iscatter",
      "MPI_Iscatterv", "MPI_Gather",      "MPI_Gatherv",   "MPI_Igather",    "MPI_Igatherv",
      "MPI_Reduce",    "MPI_Ireduce",     "MPI_Allreduce", "MPI_Iallreduce", "MPI_Allgather",
      "MPI_Allgatherv", "MPI_Iallgather", "MPI_Iallgatherv", "MPI_Alltoall", "MPI_Alltoallv",
      "MPI_Ialltoall", "MPI_Ialltoallv",  "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
      "MPI_Ireduce_scatter", "MPI_Ireduce_scatter_block", "MPI_Scan", "MPI_Exscan", "MPI_Iscan"};
  return names;
}

/// Success unless the code under test called a vendor collective; the failure names it.
inline ::testing::AssertionResult no_vendor_collective(const dtl::trace::Counts& counts, const std::string& what) {
  for (const auto& name : vendor_collectives()) {
    if (counts.count(name) > 0) {
      return ::testing::AssertionFailure()
             << "rank " << comm().rank() << ": " << what << " called " << name << " (" << counts.count(name)
             << " time(s)): build it from point-to-point messages (MPI_Send, MPI_Recv, MPI_Sendrecv, "
                "MPI_Isend, MPI_Irecv, MPI_Wait*), not the vendor's collective";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Success if every message carried `tag` and no receive used a wildcard.
inline ::testing::AssertionResult only_tag(const dtl::trace::Counts& counts, int tag, const std::string& what) {
  for (const auto& [sent_tag, n] : counts.sends_by_tag) {
    if (sent_tag != tag) {
      return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what << " sent " << n
                                           << " message(s) with tag " << sent_tag << "; every message must carry "
                                           << "the tag argument, " << tag;
    }
  }
  if (counts.any_source_receives + counts.any_tag_receives > 0) {
    return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what
                                         << " received with MPI_ANY_SOURCE or MPI_ANY_TAG; name the peer and the tag";
  }
  return ::testing::AssertionSuccess();
}

/// Receive calls of any kind (a MPI_Sendrecv counts as one receive).
inline std::int64_t receives(const dtl::trace::Counts& counts) {
  return counts.count("MPI_Recv") + counts.count("MPI_Irecv") + counts.count("MPI_Sendrecv") +
         counts.count("MPI_Sendrecv_replace");
}

/// The sum of `mine` over the ranks of comm() (collective; the test's own MPI_Allreduce).
inline std::int64_t sum_over_ranks(std::int64_t mine) {
  std::int64_t sum = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, comm()));
  return sum;
}

/// ceil(log2 p): the rounds of a binomial tree on p ranks.
inline int ceil_log2(int p) {
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  return rounds;
}

/// Whether a sweep should go on: false on every rank once any rank has a failure
/// in this test (collective), so one mistake gives one report, not a hundred.
inline bool keep_going() { return dtl::testing::all_ranks(!::testing::Test::HasFailure()); }

}  // namespace lab02_test
