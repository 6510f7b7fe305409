// Task B, scatter and gather: for every root, count and element type the result
// equals MPI_Scatter's / MPI_Gather's, no vendor collective is called, and the
// tracer sees a binomial tree — every non-root receives (scatter) or sends (gather)
// exactly once, the root exchanges one message per round, ceil(log2 P), and no rank
// more than that.
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

constexpr int kTag = 6;

// The tree's shape from one rank's counts: `edge` is what each non-root does once
// (a receive in a scatter, a send in a gather), `fan` what the root does once per
// round (sends in a scatter, receives in a gather).
void expect_tree_shape(std::int64_t edge, std::int64_t fan, int root, const std::string& kinds,
                       const std::string& what) {
  const int rank = comm().rank();
  const int rounds = ceil_log2(comm().size());
  if (rank != root) {
    EXPECT_EQ(edge, 1) << "rank " << rank << ": every rank but the root " << kinds << " exactly once (" << what << ")";
  }
  EXPECT_LE(fan, rounds) << "rank " << rank << ": a binomial tree has ceil(log2 P) = " << rounds
                         << " rounds, one message per round at most (" << what << ")";
  if (rank == root) {
    EXPECT_EQ(fan, rounds) << "rank " << rank << " (the root): one message per round of the tree, not one per rank ("
                           << what << ")";
  }
}

template <typename T>
void check_scatter() {
  const int rank = comm().rank();
  const int size = comm().size();
  for (int root = 0; root < size; ++root) {
    for (std::size_t count : sweep_counts()) {
      if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
      const std::string what = "scatter, " + case_name(type_name<T>(), root, count);
      // The root's P blocks; the other ranks pass an empty send_buf, as they may.
      const std::vector<T> send = rank == root ? values<T>(size * count, root) : std::vector<T>();
      std::vector<T> recv(count, T{-1});
      const auto counts = traced([&] { dtl::lab02::scatter<T>(comm(), send, recv, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      EXPECT_TRUE(only_tag(counts, kTag, what));

      std::vector<T> expected(count, T{-1});
      const int n = static_cast<int>(count);
      DTL_MPI_CHECK(MPI_Scatter(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(),
                                root, comm()));
      EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
      if (count == 0) continue;
      expect_tree_shape(receives(counts), counts.messages_sent, root, "receives", what);
      if (rank == root) {
        EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((size - 1) * count * sizeof(T)))
            << "rank " << rank << " (the root): every block but its own leaves the root once (" << what << ")";
      }
    }
  }
}

template <typename T>
void check_gather() {
  const int rank = comm().rank();
  const int size = comm().size();
  for (int root = 0; root < size; ++root) {
    for (std::size_t count : sweep_counts()) {
      if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
      const std::string what = "gather, " + case_name(type_name<T>(), root, count);
      const std::vector<T> send = values<T>(count, rank);
      // Only the root needs the result buffer; the others pass an empty one, as they may.
      std::vector<T> recv(rank == root ? size * count : 0, T{-1});
      const auto counts = traced([&] { dtl::lab02::gather<T>(comm(), send, recv, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      EXPECT_TRUE(only_tag(counts, kTag, what));

      std::vector<T> expected(recv.size(), T{-1});
      const int n = static_cast<int>(count);
      DTL_MPI_CHECK(MPI_Gather(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(),
                               root, comm()));
      EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
      if (count > 0) expect_tree_shape(counts.messages_sent, receives(counts), root, "sends", what);
    }
  }
}

TEST(Scatter, BinomialTreeMatchesVendor) {
  for_each_type([](auto type) { check_scatter<typename decltype(type)::type>(); });
}

TEST(Gather, BinomialTreeMatchesVendor) {
  for_each_type([](auto type) { check_gather<typename decltype(type)::type>(); });
}

TEST(ScatterGather, RejectsBadArguments) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  using dtl::InvalidArgument;
  const int size = comm().size();
  const std::vector<float> blocks(size * 4);
  const std::vector<float> one_too_many(size * 4 + 1);  // wrong on every rank: not empty, not P blocks
  std::vector<float> block(4), all(size * 4), too_long(size * 4 + 1);
  using dtl::lab02::gather;
  using dtl::lab02::scatter;
  for (int bad_root : {-1, size}) {
    EXPECT_THAT([&] { scatter<float>(comm(), blocks, block, bad_root, 0); },
                ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("'root'"), HasSubstr("rank "))));
    EXPECT_THAT([&] { gather<float>(comm(), block, all, bad_root, 0); },
                ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("'root'"), HasSubstr("rank "))));
  }
  EXPECT_THAT([&] { scatter<float>(comm(), blocks, block, 0, -1); }, ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  EXPECT_THAT([&] { gather<float>(comm(), block, all, 0, 32768); }, ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  EXPECT_THAT([&] { scatter<float>(comm(), one_too_many, block, 0, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'send_buf'")));
  EXPECT_THAT([&] { gather<float>(comm(), block, too_long, 0, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
}

}  // namespace
