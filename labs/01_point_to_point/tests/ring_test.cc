// Task B, ring_shift(): correct at every size, and never a deadlock. The large
// sizes are far above Open MPI's eager limit (4 KiB over shared memory), where
// "everyone MPI_Send, then MPI_Recv" hangs: only a deadlock-free order passes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "harness/error.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::lab01::ring_shift;
using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::pattern_bytes;

int left_of(int rank) { return (rank - 1 + comm().size()) % comm().size(); }

void check_shift(std::size_t bytes, int tag) {
  const int rank = comm().rank();
  const auto send = pattern_bytes(bytes, rank);
  std::vector<std::byte> recv(bytes, std::byte{0xEE});
  dtl::trace::reset_counts();
  ring_shift(comm(), send, recv, tag);
  const auto counts = dtl::trace::counts();
  EXPECT_TRUE(buffers_equal(pattern_bytes(bytes, left_of(rank)), recv,
                            "recv_buf (" + std::to_string(bytes) + " B from rank " +
                                std::to_string(left_of(rank)) + ")"));
  EXPECT_EQ(counts.messages_sent, 1) << "rank " << rank << " should send one message per shift";
  EXPECT_EQ(counts.sends_by_tag, (std::map<int, std::int64_t>{{tag, 1}}))
      << "rank " << rank << ": the message must carry the tag argument (" << tag << ")";
  EXPECT_EQ(counts.any_source_receives + counts.any_tag_receives, 0)
      << "rank " << rank << ": receive from the left neighbour with the tag, not MPI_ANY_SOURCE/MPI_ANY_TAG";
  EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>(bytes)) << "rank " << rank;
}

TEST(Ring, ShiftsSmallMessages) {
  for (std::size_t bytes : {0, 1, 3, 100, 1000}) check_shift(bytes, 3);
}

TEST(Ring, ShiftsLargeMessagesWithoutDeadlock) {
  for (std::size_t bytes : {4096, 4097, 65536 + 7, 1 << 20, (4 << 20) + 1}) check_shift(bytes, 4);
}

// P shifts bring every rank's data back home.
TEST(Ring, FullCircleReturnsOwnData) {
  const int rank = comm().rank();
  const std::size_t bytes = 100000 + 3;
  auto data = pattern_bytes(bytes, rank);
  std::vector<std::byte> next(bytes);
  for (int step = 0; step < comm().size(); ++step) {
    ring_shift(comm(), data, next, step);
    std::swap(data, next);
  }
  EXPECT_TRUE(buffers_equal(pattern_bytes(bytes, rank), data, "data after a full circle"));
}

// Messages with other tags, and (from three ranks up) a message with the same
// tag from another source, are in flight when ring_shift starts: it must
// receive from its left neighbour with its own tag only.
TEST(Ring, KeepsTagsAndSourcesApart) {
  const int rank = comm().rank();
  const int size = comm().size();
  // Below the eager limit, so that code which takes a decoy still returns and
  // the test can say which message went missing instead of hanging.
  const std::size_t bytes = 1000;
  const int tag = 9;
  std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
  const auto decoy = pattern_bytes(bytes, 500 + rank);
  DTL_MPI_CHECK(MPI_Isend(decoy.data(), bytes, MPI_BYTE, (rank + 1) % size, 0, comm(), &requests[0]));
  DTL_MPI_CHECK(MPI_Isend(decoy.data(), bytes, MPI_BYTE, (rank + 1) % size, tag + 1, comm(), &requests[1]));
  if (size >= 3) {
    DTL_MPI_CHECK(MPI_Isend(decoy.data(), bytes, MPI_BYTE, (rank + 2) % size, tag, comm(), &requests[2]));
  }

  check_shift(bytes, tag);

  const auto expected = pattern_bytes(bytes, 500 + left_of(rank));
  for (int decoy_tag : {0, tag + 1}) {
    EXPECT_TRUE(dtl::testing::pending_message(left_of(rank), decoy_tag, expected,
                                              "the message with tag " + std::to_string(decoy_tag)));
  }
  if (size >= 3) {
    const int two_left = (rank - 2 + size) % size;
    EXPECT_TRUE(dtl::testing::pending_message(two_left, tag, pattern_bytes(bytes, 500 + two_left),
                                              "the message from rank " + std::to_string(two_left) + " with tag 9"));
  }
  DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

TEST(Ring, RejectsBadArguments) {
  std::vector<std::byte> send(8), recv(8), shorter(7);
  using dtl::InvalidArgument;
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  EXPECT_THAT([&] { ring_shift(comm(), send, shorter, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { ring_shift(comm(), send, recv, -1); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
}

}  // namespace
