// Hidden tests for lab 02 (an example set): 6 and 7 ranks (not powers of two,
// deeper and lopsided trees), odd roots, odd counts, and full-size buffers on the
// ranks where they are ignored (which must stay untouched). Same oracle as the
// public tests: the vendor's collective; the same no-vendor-collective check.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "labs/02_collectives/tests/collective_test_util.h"

namespace {

using namespace lab02_test;
using dtl::testing::buffers_equal;
namespace lab = dtl::lab02;

constexpr int kTag = 3;
const std::vector<std::size_t> kOddCounts = {13, 4099, 65537};

std::vector<int> odd_roots() {
  std::vector<int> roots;
  for (int r = 1; r < comm().size(); r += 2) roots.push_back(r);
  return roots;
}

TEST(HiddenBroadcast, OddRootsAndCounts) {
  const int rank = comm().rank();
  for (int root : odd_roots()) {
    for (std::size_t count : kOddCounts) {
      for (std::size_t switch_bytes : {std::size_t{0}, std::size_t{1} << 30}) {  // each algorithm
        if (!keep_going()) return;
        const std::string what = "broadcast, " + case_name("double", root, count);
        std::vector<double> buf = rank == root ? values<double>(count, 11) : std::vector<double>(count, -1.0);
        const auto counts = traced([&] { lab::broadcast<double>(comm(), buf, root, kTag, switch_bytes); });
        EXPECT_TRUE(no_vendor_collective(counts, what));
        EXPECT_TRUE(buffers_equal(values<double>(count, 11), buf, "buf (" + what + ")"));
      }
    }
  }
}

TEST(HiddenScatterGather, OddRootsAndCounts) {
  const int rank = comm().rank();
  const int size = comm().size();
  for (int root : odd_roots()) {
    for (std::size_t count : kOddCounts) {
      if (!keep_going()) return;
      const std::string what = case_name("int32", root, count);
      // Every rank passes a full-size send_buf; only the root's may be read.
      const auto all = values<std::int32_t>(size * count, rank == root ? 5 : 100 + rank);
      std::vector<std::int32_t> mine(count, -1), expected_mine(count, -1);
      auto counts = traced([&] { lab::scatter<std::int32_t>(comm(), all, mine, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, "scatter, " + what));
      DTL_MPI_CHECK(MPI_Scatter(all.data(), static_cast<int>(count), MPI_INT32_T, expected_mine.data(),
                                static_cast<int>(count), MPI_INT32_T, root, comm()));
      EXPECT_TRUE(buffers_equal(expected_mine, mine, "recv_buf (scatter, " + what + ")"));

      // Every rank passes a full-size recv_buf; only the root's may be written.
      std::vector<std::int32_t> gathered(size * count, -1), expected(size * count, -1);
      counts = traced([&] { lab::gather<std::int32_t>(comm(), expected_mine, gathered, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, "gather, " + what));
      DTL_MPI_CHECK(MPI_Gather(expected_mine.data(), static_cast<int>(count), MPI_INT32_T, expected.data(),
                               static_cast<int>(count), MPI_INT32_T, root, comm()));
      EXPECT_TRUE(buffers_equal(expected, gathered, "recv_buf (gather, " + what + ")"));
    }
  }
}

TEST(HiddenReduce, OddRootsAndCounts) {
  const int rank = comm().rank();
  for (int root : odd_roots()) {
    for (std::size_t count : kOddCounts) {
      if (!keep_going()) return;
      const std::string what = "reduce sum, " + case_name("float", root, count);
      const auto send = values<float>(count, 3 * rank + 1);
      std::vector<float> recv(count, -1.0f), expected(count, -1.0f);  // full size everywhere
      const auto counts = traced([&] { lab::reduce<float>(comm(), send, recv, lab::ReduceOp::kSum, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      DTL_MPI_CHECK(MPI_Reduce(send.data(), expected.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, root, comm()));
      EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
    }
  }
}

TEST(HiddenAllgatherAlltoall, OddCounts) {
  const int rank = comm().rank();
  const int size = comm().size();
  for (std::size_t count : kOddCounts) {
    if (!keep_going()) return;
    const std::string what = case_name("double", -1, count);
    const auto send = values<double>(count, rank);
    std::vector<double> all(size * count, -1.0), expected(size * count, -1.0);
    auto counts = traced([&] { lab::allgather_ring<double>(comm(), send, all, kTag); });
    EXPECT_TRUE(no_vendor_collective(counts, "allgather_ring, " + what));
    DTL_MPI_CHECK(MPI_Allgather(send.data(), static_cast<int>(count), MPI_DOUBLE, expected.data(),
                                static_cast<int>(count), MPI_DOUBLE, comm()));
    EXPECT_TRUE(buffers_equal(expected, all, "recv_buf (allgather_ring, " + what + ")"));

    const auto blocks = values<double>(size * count, 7 * rank + 2);
    std::vector<double> swapped(size * count, -1.0), expected_swapped(size * count, -1.0);
    counts = traced([&] { lab::alltoall_pairwise<double>(comm(), blocks, swapped, kTag); });
    EXPECT_TRUE(no_vendor_collective(counts, "alltoall_pairwise, " + what));
    DTL_MPI_CHECK(MPI_Alltoall(blocks.data(), static_cast<int>(count), MPI_DOUBLE, expected_swapped.data(),
                               static_cast<int>(count), MPI_DOUBLE, comm()));
    EXPECT_TRUE(buffers_equal(expected_swapped, swapped, "recv_buf (alltoall_pairwise, " + what + ")"));
  }
}

}  // namespace
