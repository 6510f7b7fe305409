// Task A, ping_pong(): the echo arrives intact at both ends, with exactly one
// message per iteration from each side, on the right tag, for any pair of ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "harness/error.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::lab01::ping_pong;
using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::pattern_bytes;
using ::testing::HasSubstr;

const std::vector<std::size_t> kSizes = {0, 1, 7, 4095, 4096, 4097, 65537, (1 << 20) + 3};

// Runs one ping-pong between `initiator` and `responder` and checks every rank:
// the two end with the initiator's message, the others are untouched, and each
// end sent exactly `iterations` messages.
void check_pair(int initiator, int responder, std::size_t bytes, int iterations, int tag) {
  const int rank = comm().rank();
  const auto message = pattern_bytes(bytes, 1000 + initiator);
  const auto send = rank == initiator ? message : pattern_bytes(bytes, rank);  // others' send is ignored
  std::vector<std::byte> recv(bytes, std::byte{0xEE});
  const auto untouched = recv;

  dtl::trace::reset_counts();
  const double start = MPI_Wtime();
  const double seconds = ping_pong(comm(), send, recv, initiator, responder, iterations, tag);
  const double elapsed = MPI_Wtime() - start;
  const auto counts = dtl::trace::counts();

  const std::string what = "recv_buf (" + std::to_string(bytes) + " B, " + std::to_string(initiator) +
                           " <-> " + std::to_string(responder) + ")";
  if (rank == initiator || rank == responder) {
    EXPECT_TRUE(buffers_equal(message, recv, what));
    EXPECT_EQ(counts.messages_sent, iterations)
        << "rank " << rank << " should send exactly one message per iteration";
    EXPECT_EQ(counts.sends_by_tag, (std::map<int, std::int64_t>{{tag, iterations}}))
        << "rank " << rank << ": every message must carry the tag argument (" << tag << ")";
    EXPECT_EQ(counts.any_source_receives + counts.any_tag_receives, 0)
        << "rank " << rank << ": receive from the peer with the tag, not MPI_ANY_SOURCE/MPI_ANY_TAG";
  } else {
    EXPECT_TRUE(buffers_equal(untouched, recv, what + " on a rank outside the pair"));
    EXPECT_EQ(counts.messages_sent, 0) << "rank " << rank << " is not in the pair and should not send";
    EXPECT_EQ(seconds, 0.0) << "rank " << rank << ": only the initiator returns a time";
  }
  if (rank == initiator) {
    // The mean round trip: all of them together fit in the call's own duration.
    EXPECT_TRUE(std::isfinite(seconds) && seconds > 0.0 && seconds * iterations <= elapsed * 1.001 + 1e-7 &&
                seconds * iterations >= 0.25 * elapsed)
        << "rank " << rank << ": returned " << seconds << " s per round trip for " << iterations
        << " round trips, but the call took " << elapsed << " s in all";
  } else if (rank == responder) {
    EXPECT_EQ(seconds, 0.0) << "rank " << rank << ": only the initiator returns a time";
  }
}

TEST(PingPong, EchoesEveryMessageSize) {
  DTL_SKIP_IF_ANY(comm().size() < 2, "ping-pong needs two ranks (bad-argument test covers one)");
  const int last = comm().size() - 1;
  for (std::size_t bytes : kSizes) check_pair(0, last, bytes, 3, 11);
}

TEST(PingPong, WorksForAnyPairOfRanks) {
  DTL_SKIP_IF_ANY(comm().size() < 2, "ping-pong needs two ranks");
  const int size = comm().size();
  for (int a = 0; a < size; ++a) {
    for (int b = 0; b < size; ++b) {
      if (a != b) check_pair(a, b, 1000 + 17 * a + b, 2, a * size + b);
    }
  }
}

// A message with another tag is already on its way when ping_pong starts; it
// must be left alone (no MPI_ANY_TAG, no hard-coded tag).
TEST(PingPong, KeepsTagsApart) {
  DTL_SKIP_IF_ANY(comm().size() < 2, "ping-pong needs two ranks");
  const int rank = comm().rank();
  const int responder = 1;
  const std::size_t bytes = 256;
  const auto decoy = pattern_bytes(bytes, 77);
  for (int decoy_tag : {0, 6}) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (rank == 0) DTL_MPI_CHECK(MPI_Isend(decoy.data(), bytes, MPI_BYTE, responder, decoy_tag, comm(), &request));
    check_pair(0, responder, bytes, 2, 5);
    if (rank == responder) {
      EXPECT_TRUE(dtl::testing::pending_message(0, decoy_tag, decoy,
                                                "the message with tag " + std::to_string(decoy_tag)));
    }
    if (rank == 0) DTL_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
}

TEST(PingPong, RejectsBadArguments) {
  const int size = comm().size();
  std::vector<std::byte> send(8), recv(8), shorter(7);
  using dtl::InvalidArgument;
  using ::testing::ThrowsMessage;
  EXPECT_THAT([&] { ping_pong(comm(), send, recv, 0, 0, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'responder'")));
  EXPECT_THAT([&] { ping_pong(comm(), send, recv, 0, size, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'responder'")));
  EXPECT_THAT([&] { ping_pong(comm(), send, recv, -1, 0, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'initiator'")));
  if (size >= 2) {
    EXPECT_THAT([&] { ping_pong(comm(), send, recv, 0, 1, 0, 0); },
                ThrowsMessage<InvalidArgument>(HasSubstr("'iterations'")));
    EXPECT_THAT([&] { ping_pong(comm(), send, shorter, 0, 1, 1, 0); },
                ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
    EXPECT_THAT([&] { ping_pong(comm(), send, recv, 0, 1, 1, -3); },
                ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  }
}

}  // namespace
