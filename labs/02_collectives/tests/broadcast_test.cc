// Task A, the broadcasts: for every root, count and element type the result equals
// MPI_Bcast's, no vendor collective is called, and each algorithm has its shape —
// the binomial tree: every non-root receives exactly once, the root sends one
// message per round, nobody sends more than ceil(log2 P), P - 1 messages in all,
// each the whole buffer; scatter + allgather: the root sends about 2n bytes, not
// the tree's ceil(log2 P) * n.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective_test_util.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace {

using namespace lab02_test;
using dtl::testing::buffers_equal;

constexpr int kTag = 5;

template <typename T>
using BroadcastFn = void (*)(MPI_Comm, std::span<T>, int, int);

// What the tracer must show after one binomial broadcast of `count` elements.
template <typename T>
void expect_binomial_shape(const dtl::trace::Counts& counts, int root, std::size_t count, const std::string& what) {
  const int rank = comm().rank();
  const int rounds = ceil_log2(comm().size());
  const std::int64_t messages_in_all = sum_over_ranks(counts.messages_sent);
  EXPECT_EQ(receives(counts), rank == root ? 0 : 1)
      << "rank " << rank << ": in a broadcast tree every rank but the root receives exactly once (" << what << ")";
  EXPECT_LE(counts.messages_sent, rounds)
      << "rank " << rank << ": a binomial tree has ceil(log2 P) = " << rounds << " rounds, one send per round at most ("
      << what << ")";
  if (rank == root) {
    EXPECT_EQ(counts.messages_sent, rounds)
        << "rank " << rank << ": the root starts one subtree in every round (" << what << ")";
  }
  EXPECT_EQ(counts.bytes_sent, counts.messages_sent * static_cast<std::int64_t>(count * sizeof(T)))
      << "rank " << rank << ": every message of the tree carries the whole buffer (" << what << ")";
  EXPECT_EQ(messages_in_all, comm().size() - 1) << "a tree on P ranks has P - 1 edges (" << what << ")";
}

// What the tracer must show after one scatter + allgather broadcast.
template <typename T>
void expect_scatter_allgather_shape(const dtl::trace::Counts& counts, int root, std::size_t count,
                                    const std::string& what) {
  const int rank = comm().rank();
  const int size = comm().size();
  const int rounds = ceil_log2(size);
  EXPECT_LE(counts.messages_sent, rounds + size - 1)
      << "rank " << rank << ": at most ceil(log2 P) scatter messages and P - 1 ring steps (" << what << ")";
  if (rank == root) {
    // The root sends every chunk but its own in the scatter, and every chunk but
    // one around the ring: about 2 (P-1)/P * n, never the tree's ceil(log2 P) * n.
    const std::size_t limit = 2 * (count - count / size) * sizeof(T);
    EXPECT_LE(counts.bytes_sent, static_cast<std::int64_t>(limit))
        << "rank " << rank << " (the root) sent " << counts.bytes_sent << " bytes; scatter + allgather sends each "
        << "chunk about twice, at most " << limit << " bytes (" << what << ")";
  }
}

enum class Shape { kBinomialTree, kScatterAllgather };

// Broadcasts with `bcast` from every root, for every count of the sweep, and
// checks each result against MPI_Bcast's and the tracer's counts against `shape`.
template <typename T>
void check_broadcast(const std::string& name, BroadcastFn<T> bcast, Shape shape) {
  const int rank = comm().rank();
  for (int root = 0; root < comm().size(); ++root) {
    for (std::size_t count : sweep_counts()) {
      if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
      const std::string what = name + ", " + case_name(type_name<T>(), root, count);
      std::vector<T> buf = rank == root ? values<T>(count, root) : std::vector<T>(count, T{-1});
      const auto counts = traced([&] { bcast(comm(), buf, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      EXPECT_TRUE(only_tag(counts, kTag, what));

      std::vector<T> expected = rank == root ? values<T>(count, root) : std::vector<T>(count, T{-1});
      DTL_MPI_CHECK(MPI_Bcast(expected.data(), static_cast<int>(count), dtl::mpi_datatype<T>(), root, comm()));
      EXPECT_TRUE(buffers_equal(expected, buf, "buf (" + what + ")"));
      if (count > 0 && shape == Shape::kBinomialTree) expect_binomial_shape<T>(counts, root, count, what);
      if (count > 0 && shape == Shape::kScatterAllgather) expect_scatter_allgather_shape<T>(counts, root, count, what);
    }
  }
}

TEST(Broadcast, BinomialTreeMatchesVendor) {
  for_each_type([](auto type) {
    using T = typename decltype(type)::type;
    check_broadcast<T>("broadcast_binomial", &dtl::lab02::broadcast_binomial<T>, Shape::kBinomialTree);
  });
}

TEST(Broadcast, ScatterAllgatherMatchesVendor) {
  for_each_type([](auto type) {
    using T = typename decltype(type)::type;
    check_broadcast<T>("broadcast_scatter_allgather", &dtl::lab02::broadcast_scatter_allgather<T>,
                       Shape::kScatterAllgather);
  });
}

// broadcast() takes the tree below switch_bytes and scatter + allgather from it on,
// from 3 ranks up; with 1 or 2 ranks always the tree. The root's bytes tell the two
// apart from 3 ranks up (ceil(log2 P) * n against about 2 (P-1)/P * n); with 2 ranks
// the tree's root sends one message and scatter + allgather's two.
TEST(Broadcast, SwitchesBySize) {
  const int rank = comm().rank();
  const int size = comm().size();
  const int root = size - 1;
  const std::size_t count = 1000;  // 4000 bytes of float
  for (std::size_t switch_bytes : {std::size_t{4000}, std::size_t{4001}, dtl::lab02::kBroadcastSwitchBytes}) {
    if (!keep_going()) return;
    const bool tree = size < 3 || count * sizeof(float) < switch_bytes;
    const std::string what = "broadcast with switch_bytes " + std::to_string(switch_bytes) + " at " +
                             std::to_string(size) + " rank(s), " + case_name("float", root, count);
    std::vector<float> buf = rank == root ? values<float>(count, 9) : std::vector<float>(count, -1.0f);
    const auto counts = traced([&] { dtl::lab02::broadcast<float>(comm(), buf, root, kTag, switch_bytes); });
    EXPECT_TRUE(no_vendor_collective(counts, what));
    EXPECT_TRUE(buffers_equal(values<float>(count, 9), buf, "buf (" + what + ")"));
    if (tree) {
      expect_binomial_shape<float>(counts, root, count, what + ": expected the binomial tree");
    } else if (rank == root) {
      const auto tree_bytes = static_cast<std::int64_t>(ceil_log2(size) * count * sizeof(float));
      EXPECT_LT(counts.bytes_sent, tree_bytes)
          << "rank " << rank << " (the root) sent " << counts.bytes_sent << " bytes, as much as the binomial tree; "
          << "from switch_bytes on, with 3 or more ranks, broadcast() must use scatter + allgather (" << what << ")";
    }
  }
}

TEST(Broadcast, RejectsBadArguments) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const int size = comm().size();
  std::vector<float> buf(8);
  const std::vector<BroadcastFn<float>> all = {
      &dtl::lab02::broadcast_binomial<float>, &dtl::lab02::broadcast_scatter_allgather<float>,
      [](MPI_Comm c, std::span<float> b, int root, int tag) { dtl::lab02::broadcast<float>(c, b, root, tag); }};
  for (const auto bcast : all) {
    for (int bad_root : {-1, size}) {
      EXPECT_THAT([&] { bcast(comm(), buf, bad_root, 0); },
                  ThrowsMessage<dtl::InvalidArgument>(AllOf(HasSubstr("'root'"), HasSubstr("rank "))));
    }
    for (int bad_tag : {-1, 32768}) {
      EXPECT_THAT([&] { bcast(comm(), buf, 0, bad_tag); },
                  ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'tag'")));
    }
  }
}

}  // namespace
