/// @file
/// @brief Checks every collective test repeats: element types, integer-valued data,
/// the tracer's proof that no vendor collective was called, tags, counts over ranks,
/// communicators whose ranks are not the world's, and decoy messages.
///
/// Labs 02 and 03 (and any lab that builds a collective from point-to-point
/// messages) test the same way: sweep float, double and int32; make integer
/// values whose sums are exact in any order, so results compare bit-exact with
/// the vendor's; run the code under test with the tracer's counters reset; and
/// check from the counts that it called no vendor collective, kept to its tag,
/// and sent what its algorithm says. The vendor's collective, the oracle, is
/// called by the test after the counts were taken, so it is never held against
/// the code under test. The hidden tests of labs 02 and 03 also sweep communicators
/// split from the test's (on_each_communicator()) and keep decoy messages in flight
/// during each call (run_checked()).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"

namespace dtl::testing {

/// @brief Calls `check(std::type_identity<T>{})` for T = float, double and std::int32_t.
///
/// In the lambda, this line names the type:
/// @code
/// using T = typename decltype(type)::type;
/// @endcode
/// @tparam F a callable taking std::type_identity<T>.
/// @param[in] check the per-type test body.
template <typename F>
void for_each_type(F&& check) {
  check(std::type_identity<float>{});
  check(std::type_identity<double>{});
  check(std::type_identity<std::int32_t>{});
}

/// @brief The element type's name for failure messages.
/// @tparam T float, double or std::int32_t.
/// @return "float", "double" or "int32".
template <typename T>
std::string type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else return "int32";
}

/// @brief `n` integer values in [-125, 125] that differ with `seed` (use the rank).
///
/// Sums of up to 8 of them are exact in float, so any summation order gives the
/// same bits and results compare bit-exact with the vendor's.
/// @tparam T the element type.
/// @param[in] n how many.
/// @param[in] seed varies the values (pass the rank).
/// @return the values.
template <typename T>
std::vector<T> values(std::size_t n, int seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<T>(static_cast<int>((i * 131 + static_cast<std::size_t>(seed) * 37 + 1) % 251) - 125);
  }
  return v;
}

/// @brief Runs `call` (the code under test) with the tracer's counters reset right before.
/// @tparam F a callable taking no arguments.
/// @param[in] call the code under test.
/// @return this rank's counts of what `call` did.
template <typename F>
dtl::trace::Counts traced(F&& call) {
  dtl::trace::reset_counts();
  call();
  return dtl::trace::counts();
}

/// @brief The vendor collectives a lab's own collective must not call.
/// @return the blocking ones, their nonblocking I-forms and the scans; the tracer traces each.
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

/// @brief Success unless the code under test called a vendor collective.
/// @param[in] counts what traced() returned.
/// @param[in] what the function under test, for the message.
/// @return a failure naming the vendor collective and how often it was called.
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

/// @brief Success if every message carried `tag` and no receive used a wildcard.
/// @param[in] counts what traced() returned.
/// @param[in] tag the tag every message must carry.
/// @param[in] what the function under test, for the message.
/// @return a failure naming the wrong tag, or the wildcard receive.
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

/// @brief Receive calls of any kind (a MPI_Sendrecv counts as one receive).
/// @param[in] counts what traced() returned.
/// @return MPI_Recv + MPI_Irecv + MPI_Sendrecv + MPI_Sendrecv_replace calls.
inline std::int64_t receives(const dtl::trace::Counts& counts) {
  return counts.count("MPI_Recv") + counts.count("MPI_Irecv") + counts.count("MPI_Sendrecv") +
         counts.count("MPI_Sendrecv_replace");
}

/// @brief The sum of `mine` over the ranks of comm() (collective; the test's own MPI_Allreduce).
/// @param[in] mine this rank's term.
/// @return the sum, on every rank.
inline std::int64_t sum_over_ranks(std::int64_t mine) {
  std::int64_t sum = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, comm()));
  return sum;
}

/// @brief Whether a sweep should go on (collective).
/// @return false on every rank once any rank has a failure in this test, so one
///         mistake gives one report, not a hundred.
inline bool keep_going() { return dtl::testing::all_ranks(!::testing::Test::HasFailure()); }

/// @brief A communicator made from comm() by MPI_Comm_split (collective over comm()).
/// @param[in] color ranks with the same color share the new communicator.
/// @param[in] key orders the ranks in it.
/// @return the new communicator, owned.
inline dtl::Comm split_comm(int color, int key) {
  MPI_Comm raw = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(comm(), color, key, &raw));
  dtl::Comm owned(raw);
  MPI_Comm_free(&raw);
  return owned;
}

/// @brief Runs `sweep(on, name)` on comm(), on all of its ranks numbered backwards,
/// and on its even and its odd ranks (two communicators of their own), so that code
/// that talks on MPI_COMM_WORLD or uses world ranks fails (collective over comm()).
/// @tparam Sweep a callable taking (const dtl::Comm&, const std::string&).
/// @param[in] sweep the test body; the name says which communicator it runs on.
template <typename Sweep>
void on_each_communicator(Sweep&& sweep) {
  sweep(comm(), "the test's communicator");
  sweep(split_comm(0, comm().size() - 1 - comm().rank()), "the world reversed");
  sweep(split_comm(comm().rank() % 2, comm().rank()),
        comm().rank() % 2 ? "the odd world ranks" : "the even world ranks");
}

/// @brief keep_going() on `on` (collective over `on`).
/// @param[in] on the communicator whose ranks decide together.
/// @return false on all of its ranks once any has a failure in this test.
inline bool keep_going_on(const dtl::Comm& on) {
  int mine = ::testing::Test::HasFailure() ? 0 : 1, all = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, on));
  return all == 1;
}

/// @brief Calls `f(std::type_identity<T>{})` for one of float, double and
/// std::int32_t, picked by `k` (k mod 3), so a sweep varies the type with the case.
/// @tparam F a callable taking std::type_identity<T>.
/// @param[in] k the case's number.
/// @param[in] f the per-type test body.
template <typename F>
void with_type(std::size_t k, F&& f) {
  if (k % 3 == 0) f(std::type_identity<float>{});
  else if (k % 3 == 1) f(std::type_identity<double>{});
  else f(std::type_identity<std::int32_t>{});
}

/// @brief Empty messages with tags tag^1 and tag^2 from each neighbour on `on`,
/// sent before the call under test: a receive with MPI_ANY_TAG, or with a tag of
/// its own, takes one.
///
/// Construct it on every rank of `on` before the call, and call still_waiting()
/// on every rank after it.
class Decoys {
 public:
  /// @brief Sends the decoys (nonblocking) to both neighbours on `on`.
  /// @param[in] on the communicator of the call under test; must outlive this.
  /// @param[in] tag the call's tag (the decoys carry two others).
  Decoys(const dtl::Comm& on, int tag) : on_(on), tags_{tag ^ 1, tag ^ 2} {
    if (on.size() == 1) return;
    for (int t : tags_) {
      for (int dest : {(on.rank() + 1) % on.size(), (on.rank() - 1 + on.size()) % on.size()}) {
        requests_.emplace_back();
        DTL_MPI_CHECK(MPI_Isend(&byte_, 0, MPI_BYTE, dest, t, on, &requests_.back()));
      }
    }
  }

  /// @brief After the call: each decoy must still be waiting (polls for a second,
  /// then receives it), and the sends complete.
  /// @param[in] what the call under test, for the message.
  /// @return a failure naming a decoy the call took.
  ::testing::AssertionResult still_waiting(const std::string& what) {
    auto result = ::testing::AssertionSuccess();
    const int p = on_.size();
    for (int t : tags_) {
      for (int source : {(on_.rank() - 1 + p) % p, (on_.rank() + 1) % p}) {
        if (p == 1) continue;
        const double deadline = MPI_Wtime() + 1.0;
        int found = 0;
        while (!found && MPI_Wtime() < deadline) DTL_MPI_CHECK(MPI_Iprobe(source, t, on_, &found, MPI_STATUS_IGNORE));
        if (!found) {
          result = ::testing::AssertionFailure()
                   << what << ": an empty message with tag " << t << " from rank " << source
                   << ", sent before the call, was taken by it. Receive with the tag argument and the sending "
                   << "rank, never MPI_ANY_TAG or MPI_ANY_SOURCE";
          continue;
        }
        DTL_MPI_CHECK(MPI_Recv(&byte_, 0, MPI_BYTE, source, t, on_, MPI_STATUS_IGNORE));
      }
    }
    DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
    return result;
  }

  /// @brief When the call threw before still_waiting(): receives the decoys that
  /// came and lets the sends go (MPI_Request_free), so that no message of this test
  /// is left in flight when its communicator is freed. Open MPI then deadlocks the
  /// next test's MPI_Comm_dup at 3 or more ranks (seen with a skeleton that throws).
  ~Decoys() {
    if (requests_.empty()) return;
    const int p = on_.size();
    const double deadline = MPI_Wtime() + 1.0;
    for (int t : tags_) {
      for (int source : {(on_.rank() - 1 + p) % p, (on_.rank() + 1) % p}) {
        int found = 0;
        while (!found && MPI_Wtime() < deadline) MPI_Iprobe(source, t, on_, &found, MPI_STATUS_IGNORE);
        if (found) MPI_Recv(&byte_, 0, MPI_BYTE, source, t, on_, MPI_STATUS_IGNORE);
      }
    }
    for (MPI_Request& r : requests_) MPI_Request_free(&r);
  }
  Decoys(const Decoys&) = delete;
  Decoys& operator=(const Decoys&) = delete;

 private:
  const dtl::Comm& on_;
  int tags_[2];
  std::byte byte_{};
  std::vector<MPI_Request> requests_;
};

/// @brief Runs `call` (the code under test) with Decoys in flight and the tracer
/// reset; expects the decoys still waiting, no vendor collective and only `tag`
/// (collective over `on`).
/// @tparam F a callable taking no arguments.
/// @param[in] on the communicator of the call.
/// @param[in] tag the call's tag.
/// @param[in] what the call, for the messages.
/// @param[in] call the code under test.
/// @return this rank's counts of what `call` did.
template <typename F>
dtl::trace::Counts run_checked(const dtl::Comm& on, int tag, const std::string& what, F&& call) {
  Decoys decoys(on, tag);
  const auto counts = traced(call);
  EXPECT_TRUE(decoys.still_waiting(what));
  EXPECT_TRUE(no_vendor_collective(counts, what));
  EXPECT_TRUE(only_tag(counts, tag, what));
  return counts;
}

}  // namespace dtl::testing
