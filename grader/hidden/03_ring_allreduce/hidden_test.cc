// Hidden tests for lab 03 (an example set): 6 and 7 ranks, odd counts, a
// sub-communicator (the code must use `comm`, never MPI_COMM_WORLD), a message
// with another tag waiting on the same communicator (the ring must receive only
// its own tag), and rings called back to back (no message may leak from one
// into the next). Same oracle as the public tests: Open MPI's MPI_Allreduce.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "labs/03_ring_allreduce/tests/ring_test_util.h"

namespace {

using namespace lab03_test;
using dtl::testing::buffers_equal;
namespace lab03 = dtl::lab03;

constexpr int kTag = 9;
const std::vector<std::size_t> kOddCounts = {13, 4099, 65537, 262147};

// Runs every allreduce flavour on `on` (a communicator of the calling rank) and
// compares with MPI_Allreduce on the same communicator.
void check_on(MPI_Comm on, const std::string& where) {
  int rank = 0, size = 0;
  MPI_Comm_rank(on, &rank);
  MPI_Comm_size(on, &size);
  for (std::size_t count : kOddCounts) {
    const std::vector<double> mine = values<double>(count, 5 * rank + 1);
    std::vector<double> expected(count);
    DTL_MPI_CHECK(MPI_Allreduce(mine.data(), expected.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, on));
    std::vector<double> plain = mine, segmented = mine;
    const auto counts = traced([&] {
      lab03::allreduce_ring<double>(on, plain, Op::kSum, kTag);
      lab03::allreduce_ring_segmented<double>(on, segmented, Op::kSum, kTag, 1000);
    });
    const std::string what = where + ", double, count " + std::to_string(count);
    EXPECT_TRUE(no_vendor_collective(counts, what));
    EXPECT_TRUE(buffers_equal(expected, plain, "allreduce_ring buf (" + what + ")"));
    EXPECT_TRUE(buffers_equal(expected, segmented, "allreduce_ring_segmented buf (" + what + ")"));
  }
}

TEST(HiddenRing, OddCountsOnEveryType) {
  const int rank = comm().rank();
  for_each_type([&](auto type) {
    using T = typename decltype(type)::type;
    for (std::size_t count : kOddCounts) {
      for (Op op : {Op::kSum, Op::kAvg}) {
        if (!keep_going()) return;
        const std::string what = case_name("allreduce_ring_segmented", type_name<T>(), op, count);
        const std::vector<T> mine = values<T>(count, rank + 3);
        std::vector<T> buf = mine;
        lab03::allreduce_ring_segmented<T>(comm(), buf, op, kTag, 333);
        EXPECT_TRUE(buffers_equal(vendor_allreduce(mine, op), buf, "buf (" + what + ")"));
      }
    }
  });
}

TEST(HiddenRing, UsesTheCommunicatorItIsGiven) {
  // Even and odd ranks form two rings of their own; a ring that talks on
  // MPI_COMM_WORLD, or uses world ranks, hangs or mixes them up.
  MPI_Comm half = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(comm(), comm().rank() % 2, comm().rank(), &half));
  check_on(half, "on the even/odd half of the ranks");
  MPI_Comm_free(&half);
}

TEST(HiddenRing, ReceivesOnlyItsOwnTag) {
  // A message with another tag is already waiting from the left neighbour; the
  // ring must leave it alone, and it must still be there afterwards.
  const int rank = comm().rank();
  const int size = comm().size();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  const int decoy = -12345;
  MPI_Request sent = MPI_REQUEST_NULL;
  if (size > 1) DTL_MPI_CHECK(MPI_Isend(&decoy, 1, MPI_INT, right, kTag + 1, comm(), &sent));
  std::vector<float> buf = values<float>(4099, rank);
  const std::vector<float> expected = vendor_allreduce(values<float>(4099, rank), Op::kSum);
  lab03::allreduce_ring<float>(comm(), buf, Op::kSum, kTag);
  EXPECT_TRUE(buffers_equal(expected, buf, "buf (allreduce_ring with a decoy of another tag waiting)"));
  if (size > 1) {
    int got = 0;
    DTL_MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, left, kTag + 1, comm(), MPI_STATUS_IGNORE));
    EXPECT_EQ(got, decoy) << "rank " << rank << ": the message with tag " << kTag + 1
                          << " was consumed or damaged by the ring";
    DTL_MPI_CHECK(MPI_Wait(&sent, MPI_STATUS_IGNORE));
  }
}

TEST(HiddenRing, BackToBackRingsDoNotMix) {
  // Three rings in a row on the same tag, different data: every message of one
  // must be received inside it.
  const int rank = comm().rank();
  for (int round = 0; round < 3; ++round) {
    const std::vector<std::int32_t> mine = values<std::int32_t>(10007, rank * 7 + round);
    std::vector<std::int32_t> a = mine, b = mine;
    lab03::allreduce_ring<std::int32_t>(comm(), a, Op::kSum, kTag);
    lab03::allreduce_ring_segmented<std::int32_t>(comm(), b, Op::kSum, kTag, 64);
    const auto expected = vendor_allreduce(mine, Op::kSum);
    EXPECT_TRUE(buffers_equal(expected, a, "allreduce_ring, round " + std::to_string(round)));
    EXPECT_TRUE(buffers_equal(expected, b, "allreduce_ring_segmented, round " + std::to_string(round)));
  }
}

}  // namespace
