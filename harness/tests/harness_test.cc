// Tests of the harness itself: errors name the call and the rank, communicators
// are owned, the tracer counts what was called, the checks say where buffers differ.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "harness/comm/mpi.h"
#include "harness/error.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using dtl::testing::comm;

TEST(Error, MpiCheckThrowsWithCallFileAndRank) {
  const int bad_rank = comm().size() + 5;  // no such process
  int value = 0;
  try {
    DTL_MPI_CHECK(MPI_Send(&value, 1, MPI_INT, bad_rank, 0, comm()));
    ADD_FAILURE() << "MPI_Send to a rank that does not exist should fail";
  } catch (const dtl::MpiError& e) {
    EXPECT_THAT(e.what(), HasSubstr("MPI_Send"));
    EXPECT_THAT(e.what(), HasSubstr("harness_test.cc"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank())));
    EXPECT_NE(e.code(), MPI_SUCCESS);
  }
}

TEST(Error, InvalidArgumentNamesFunctionArgumentAndRank) {
  try {
    DTL_REQUIRE_ARG(false, "ring_shift", "recv_buf", "is too small");
    ADD_FAILURE() << "expected a throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("ring_shift: argument 'recv_buf' is too small"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank()) + " of"));
  }
}

TEST(Error, NotImplementedNamesTheFunction) {
  const dtl::NotImplemented e("ping_pong");
  EXPECT_THAT(e.what(), HasSubstr("ping_pong is not implemented yet"));
  EXPECT_THAT(e.what(), HasSubstr("TODO(student)"));
}

TEST(Comm, DuplicateIsSeparateAndMovable) {
  dtl::Comm a(comm().get());
  EXPECT_EQ(a.rank(), comm().rank());
  EXPECT_EQ(a.size(), comm().size());
  int result = 0;
  MPI_Comm_compare(a, comm(), &result);
  EXPECT_EQ(result, MPI_CONGRUENT);  // same group, different matching context
  dtl::Comm b(std::move(a));
  EXPECT_EQ(a.get(), MPI_COMM_NULL);
  EXPECT_EQ(b.size(), comm().size());
  MPI_Errhandler handler;
  MPI_Comm_get_errhandler(b, &handler);
  EXPECT_EQ(handler, MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&handler);
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(dtl::format_bytes(0), "0 B");
  EXPECT_EQ(dtl::format_bytes(17), "17 B");
  EXPECT_EQ(dtl::format_bytes(4096), "4 KiB");
  EXPECT_EQ(dtl::format_bytes(1 << 20), "1 MiB");
  EXPECT_EQ(dtl::format_bytes(4097), "4097 B");
}

TEST(Tracer, CountsCallsMessagesAndBytes) {
  const int rank = comm().rank();
  const int size = comm().size();
  std::vector<float> send(10, 1.0f), recv(10);
  dtl::trace::reset_counts();
  MPI_Sendrecv(send.data(), 10, MPI_FLOAT, (rank + 1) % size, 3, recv.data(), 10, MPI_FLOAT,
               (rank - 1 + size) % size, 3, comm(), MPI_STATUS_IGNORE);
  float x = 1.0f, y = 0.0f;
  MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, comm());
  const auto counts = dtl::trace::counts();
  EXPECT_EQ(counts.count("MPI_Sendrecv"), 1);
  EXPECT_EQ(counts.count("MPI_Allreduce"), 1);
  EXPECT_EQ(counts.count("MPI_Bcast"), 0);
  EXPECT_EQ(counts.messages_sent, 1);
  EXPECT_EQ(counts.bytes_sent, 40);
  EXPECT_EQ(y, static_cast<float>(size));
}

TEST(Tracer, DescribesThePendingRequestsOfAWait) {
  const int rank = comm().rank();
  const int size = comm().size();
  int out = rank, in = -1;
  MPI_Request requests[2];
  MPI_Irecv(&in, 1, MPI_INT, (rank - 1 + size) % size, 9, comm(), &requests[0]);
  MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 9, comm(), &requests[1]);
  MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
  EXPECT_EQ(in, (rank - 1 + size) % size);
  // After the wait the tracer is idle and remembers the wait as its last call.
  const std::string self = dtl::trace::describe_self();
  EXPECT_THAT(self, HasSubstr("not in an MPI call"));
  EXPECT_THAT(self, HasSubstr("MPI_Waitall(2 requests: Irecv(source="));
  EXPECT_THAT(self, HasSubstr("Isend(dest=" + std::to_string((rank + 1) % size) + ", tag=9, 4 B)"));
}

TEST(Tracer, DescribesTheNonblockingCollectiveAWaitIsFor) {
  float x = 1.0f, y = 0.0f;
  MPI_Request request;
  MPI_Iallreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, comm(), &request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  EXPECT_EQ(y, static_cast<float>(comm().size()));
  EXPECT_THAT(dtl::trace::describe_self(), HasSubstr("MPI_Wait(1 request: Iallreduce(4 B))"));
}

// Two threads calling MPI at once (a communication thread beside the main
// thread): the counts are exact, and neither thread's record overwrites the other's.
TEST(Tracer, CountsCallsFromTwoThreadsExactly) {
  dtl::Comm self_comm(comm().get());
  const int rank = comm().rank();
  constexpr int kCalls = 300;
  dtl::trace::reset_counts();
  auto loop = [&](int tag) {
    for (int i = 0; i < kCalls; ++i) {
      int out = i, in = -1;
      MPI_Sendrecv(&out, 1, MPI_INT, rank, tag, &in, 1, MPI_INT, rank, tag, self_comm, MPI_STATUS_IGNORE);
    }
  };
  std::thread other(loop, 1);
  loop(2);
  other.join();
  const auto counts = dtl::trace::counts();
  EXPECT_EQ(counts.count("MPI_Sendrecv"), 2 * kCalls);
  EXPECT_EQ(counts.messages_sent, 2 * kCalls);
  EXPECT_EQ(counts.bytes_sent, 2 * kCalls * 4);
  EXPECT_EQ(counts.sends_by_tag.at(1), kCalls);
  EXPECT_EQ(counts.sends_by_tag.at(2), kCalls);
}

TEST(Tracer, DescribesEveryThreadInsideMpi) {
  dtl::Comm self_comm(comm().get());
  const int rank = comm().rank();
  // Two threads block in MPI_Recv from this rank itself, tags 11 and 12; the main
  // thread, outside MPI, must see both, then sends what they wait for.
  auto receive = [&](int tag) {
    int in = -1;
    MPI_Recv(&in, 1, MPI_INT, rank, tag, self_comm, MPI_STATUS_IGNORE);
  };
  std::thread a(receive, 11), b(receive, 12);
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    seen = dtl::trace::describe_self();
  } while ((seen.find("tag=11") == std::string::npos || seen.find("tag=12") == std::string::npos) &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_THAT(seen, HasSubstr("running its own code"));  // the main thread itself
  EXPECT_THAT(seen, HasSubstr(": in MPI_Recv(source=" + std::to_string(rank) + ", tag=11, up to 4 B) for"));
  EXPECT_THAT(seen, HasSubstr(": in MPI_Recv(source=" + std::to_string(rank) + ", tag=12, up to 4 B) for"));
  EXPECT_THAT(seen, HasSubstr("thread "));
  for (int tag : {11, 12}) {
    int out = tag;
    MPI_Send(&out, 1, MPI_INT, rank, tag, self_comm);
  }
  a.join();
  b.join();
  // Finished threads leave no record behind.
  EXPECT_THAT(dtl::trace::describe_self(), Not(HasSubstr("tag=11")));
}

TEST(Checks, BuffersEqualNamesRankIndexExpectedAndGot) {
  const std::vector<int> expected{1, 2, 3, 4};
  const std::vector<int> actual{1, 2, 7, 9};
  const auto result = dtl::testing::buffers_equal(expected, actual, "recv_buf");
  EXPECT_FALSE(result);
  EXPECT_THAT(result.message(), HasSubstr("rank " + std::to_string(comm().rank()) + ": recv_buf[2] expected 3 got 7"));
  EXPECT_THAT(result.message(), HasSubstr("2 of 4 elements differ"));
  EXPECT_TRUE(dtl::testing::buffers_equal(expected, expected, "same"));
  const std::vector<int> shorter{1, 2};
  EXPECT_FALSE(dtl::testing::buffers_equal(expected, shorter, "short"));
}

TEST(Checks, AllRanksIsCollectiveAnd) {
  EXPECT_TRUE(dtl::testing::all_ranks(true));
  EXPECT_FALSE(dtl::testing::all_ranks(comm().rank() != comm().size() - 1));
}

TEST(Checks, EachTestHasItsOwnCommunicator) {
  EXPECT_NE(comm().get(), MPI_COMM_WORLD);
  int result = 0;
  MPI_Comm_compare(comm(), MPI_COMM_WORLD, &result);
  EXPECT_EQ(result, MPI_CONGRUENT);
}

TEST(Checks, PatternBytesDifferBySeed) {
  const auto a = dtl::testing::pattern_bytes(1000, 1);
  const auto b = dtl::testing::pattern_bytes(1000, 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, dtl::testing::pattern_bytes(1000, 1));
}

}  // namespace
