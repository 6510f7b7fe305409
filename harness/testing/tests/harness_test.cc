// Tests of the harness itself: errors name the call and the rank, communicators
// are owned, the tracer counts what was called, the checks say where buffers differ.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/json.h"
#include "harness/testing/early_wait.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "harness/testing/training_fixtures.h"

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

TEST(JsonQuoted, EscapesWhatRfc8259RequiresAndPassesTheRest) {
  EXPECT_EQ(dtl::json_quoted(""), "\"\"");
  EXPECT_EQ(dtl::json_quoted("Ring.Shifts/4"), "\"Ring.Shifts/4\"");
  EXPECT_EQ(dtl::json_quoted("say \"hi\" \\ bye"), R"("say \"hi\" \\ bye")");
  EXPECT_EQ(dtl::json_quoted("a\nb\tc\rd"), R"("a\nb\tc\u000dd")");
  EXPECT_EQ(dtl::json_quoted(std::string_view("\0\x1f", 2)), R"("\u0000\u001f")");
  EXPECT_EQ(dtl::json_quoted("r\xc3\xa9sum\xc3\xa9 \x7f"), "\"r\xc3\xa9sum\xc3\xa9 \x7f\"");  // UTF-8 and DEL kept
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

// Every traced collective, called as the standard allows: MPI_IN_PLACE with the
// ignored side's count and type given as 0 and MPI_DATATYPE_NULL (lab 03's IPC
// set-up does exactly this with MPI_Allgather; the tracer once aborted on it in
// PMPI_Type_size). Each call must reach MPI, be counted once and compute the
// closed-form result; rank r contributes r + 1 (and, at position i, 10 * r + i).
TEST(Tracer, AcceptsInPlaceAndNullDatatypesWhereTheStandardAllows) {
  const int rank = comm().rank(), size = comm().size();
  const auto up = static_cast<std::size_t>(size);
  const int root = size - 1;
  const int total = size * (size + 1) / 2;  // sum over ranks of r + 1
  auto wait = [](MPI_Request request) { MPI_Wait(&request, MPI_STATUS_IGNORE); };
  // Every rank's block i is 10 * rank + i, for the gathers and the all-to-alls.
  auto blocks_of = [&](int owner) {
    std::vector<int> v(up);
    for (std::size_t i = 0; i < up; ++i) v[i] = 10 * owner + static_cast<int>(i);
    return v;
  };
  dtl::trace::reset_counts();
  for (bool blocking : {true, false}) {
    const std::string when = blocking ? "blocking" : "nonblocking";
    MPI_Request request = MPI_REQUEST_NULL;
    {  // allreduce, reduce, scan, exscan: in place
      int v = rank + 1;
      if (blocking) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, comm());
      else wait((MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, comm(), &request), request));
      EXPECT_EQ(v, total) << when << " allreduce";
      v = rank + 1;
      int out = -1;
      // The root reduces in place; elsewhere recv_buf is ignored.
      const void* send = rank == root ? MPI_IN_PLACE : &v;
      void* recv = rank == root ? &v : nullptr;
      if (blocking) MPI_Reduce(send, recv, 1, MPI_INT, MPI_SUM, root, comm());
      else wait((MPI_Ireduce(send, recv, 1, MPI_INT, MPI_SUM, root, comm(), &request), request));
      if (rank == root) EXPECT_EQ(v, total) << when << " reduce";
      v = rank + 1;
      if (blocking) MPI_Scan(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, comm());
      else wait((MPI_Iscan(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, comm(), &request), request));
      EXPECT_EQ(v, (rank + 1) * (rank + 2) / 2) << when << " scan";
      out = rank + 1;
      if (blocking) MPI_Exscan(MPI_IN_PLACE, &out, 1, MPI_INT, MPI_SUM, comm());
      if (blocking && rank > 0) EXPECT_EQ(out, rank * (rank + 1) / 2) << "exscan";
    }
    {  // reduce-scatter (block and v): in place, one int per rank
      std::vector<int> v(up, rank + 1);
      if (blocking) MPI_Reduce_scatter_block(MPI_IN_PLACE, v.data(), 1, MPI_INT, MPI_SUM, comm());
      else wait((MPI_Ireduce_scatter_block(MPI_IN_PLACE, v.data(), 1, MPI_INT, MPI_SUM, comm(), &request), request));
      EXPECT_EQ(v[0], total) << when << " reduce_scatter_block";
      std::vector<int> ones(up, 1);
      v.assign(up, rank + 1);
      if (blocking) MPI_Reduce_scatter(MPI_IN_PLACE, v.data(), ones.data(), MPI_INT, MPI_SUM, comm());
      else wait((MPI_Ireduce_scatter(MPI_IN_PLACE, v.data(), ones.data(), MPI_INT, MPI_SUM, comm(), &request), request));
      EXPECT_EQ(v[0], total) << when << " reduce_scatter";
    }
    std::vector<int> counts(up, 1), displs(up);
    for (std::size_t i = 0; i < up; ++i) displs[i] = static_cast<int>(i);
    std::vector<int> ranks(up);
    for (std::size_t i = 0; i < up; ++i) ranks[i] = static_cast<int>(i) + 1;
    {  // allgather (and v): the send side is MPI_IN_PLACE, 0, MPI_DATATYPE_NULL
      std::vector<int> v(up, -1);
      v[static_cast<std::size_t>(rank)] = rank + 1;
      if (blocking) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), 1, MPI_INT, comm());
      else wait((MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), 1, MPI_INT, comm(), &request), request));
      EXPECT_EQ(v, ranks) << when << " allgather";
      v.assign(up, -1);
      v[static_cast<std::size_t>(rank)] = rank + 1;
      if (blocking) {
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), counts.data(), displs.data(), MPI_INT, comm());
      } else {
        wait((MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), counts.data(), displs.data(), MPI_INT,
                              comm(), &request),
              request));
      }
      EXPECT_EQ(v, ranks) << when << " allgatherv";
    }
    {  // gather (and v): in place at the root; the receive side is ignored elsewhere
      std::vector<int> v(up, -1);
      int mine = rank + 1;
      const bool at_root = rank == root;
      if (at_root) v[static_cast<std::size_t>(rank)] = mine;
      const void* send = at_root ? MPI_IN_PLACE : &mine;
      const int send_count = at_root ? 0 : 1;
      const MPI_Datatype send_type = at_root ? MPI_DATATYPE_NULL : MPI_INT;
      const MPI_Datatype recv_type = at_root ? MPI_INT : MPI_DATATYPE_NULL;
      if (blocking) MPI_Gather(send, send_count, send_type, v.data(), 1, recv_type, root, comm());
      else wait((MPI_Igather(send, send_count, send_type, v.data(), 1, recv_type, root, comm(), &request), request));
      if (at_root) EXPECT_EQ(v, ranks) << when << " gather";
      v.assign(up, -1);
      if (at_root) v[static_cast<std::size_t>(rank)] = mine;
      if (blocking) {
        MPI_Gatherv(send, send_count, send_type, v.data(), counts.data(), displs.data(), recv_type, root, comm());
      } else {
        wait((MPI_Igatherv(send, send_count, send_type, v.data(), counts.data(), displs.data(), recv_type, root,
                           comm(), &request),
              request));
      }
      if (at_root) EXPECT_EQ(v, ranks) << when << " gatherv";
    }
    {  // scatter (and v): in place at the root; the send side is ignored elsewhere
      const bool at_root = rank == root;
      std::vector<int> v = at_root ? ranks : std::vector<int>(up, -1);
      int mine = -1;
      void* recv = at_root ? MPI_IN_PLACE : &mine;
      const int recv_count = at_root ? 0 : 1;
      const MPI_Datatype recv_type = at_root ? MPI_DATATYPE_NULL : MPI_INT;
      const MPI_Datatype send_type = at_root ? MPI_INT : MPI_DATATYPE_NULL;
      if (blocking) MPI_Scatter(v.data(), 1, send_type, recv, recv_count, recv_type, root, comm());
      else wait((MPI_Iscatter(v.data(), 1, send_type, recv, recv_count, recv_type, root, comm(), &request), request));
      EXPECT_EQ(at_root ? v[static_cast<std::size_t>(rank)] : mine, rank + 1) << when << " scatter";
      mine = -1;
      if (blocking) {
        MPI_Scatterv(v.data(), counts.data(), displs.data(), send_type, recv, recv_count, recv_type, root, comm());
      } else {
        wait((MPI_Iscatterv(v.data(), counts.data(), displs.data(), send_type, recv, recv_count, recv_type, root,
                            comm(), &request),
              request));
      }
      EXPECT_EQ(at_root ? v[static_cast<std::size_t>(rank)] : mine, rank + 1) << when << " scatterv";
    }
    {  // all-to-all (and v): in place; block i of rank r goes to rank i
      std::vector<int> v = blocks_of(rank), want(up);
      for (std::size_t i = 0; i < up; ++i) want[i] = 10 * static_cast<int>(i) + rank;
      if (blocking) MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), 1, MPI_INT, comm());
      else wait((MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), 1, MPI_INT, comm(), &request), request));
      EXPECT_EQ(v, want) << when << " alltoall";
      v = blocks_of(rank);
      if (blocking) {
        MPI_Alltoallv(MPI_IN_PLACE, nullptr, nullptr, MPI_DATATYPE_NULL, v.data(), counts.data(), displs.data(),
                      MPI_INT, comm());
      } else {
        wait((MPI_Ialltoallv(MPI_IN_PLACE, nullptr, nullptr, MPI_DATATYPE_NULL, v.data(), counts.data(),
                             displs.data(), MPI_INT, comm(), &request),
              request));
      }
      EXPECT_EQ(v, want) << when << " alltoallv";
    }
  }
  // Each call was traced once (MPI_Exscan has no nonblocking twin called above).
  const auto traced = dtl::trace::counts();
  for (const char* name :
       {"MPI_Allreduce", "MPI_Iallreduce", "MPI_Reduce", "MPI_Ireduce", "MPI_Scan", "MPI_Iscan", "MPI_Exscan",
        "MPI_Reduce_scatter_block", "MPI_Ireduce_scatter_block", "MPI_Reduce_scatter", "MPI_Ireduce_scatter",
        "MPI_Allgather", "MPI_Iallgather", "MPI_Allgatherv", "MPI_Iallgatherv", "MPI_Gather", "MPI_Igather",
        "MPI_Gatherv", "MPI_Igatherv", "MPI_Scatter", "MPI_Iscatter", "MPI_Scatterv", "MPI_Iscatterv",
        "MPI_Alltoall", "MPI_Ialltoall", "MPI_Alltoallv", "MPI_Ialltoallv"}) {
    EXPECT_EQ(traced.count(name), 1) << name;
  }
  // And a rank stuck in one would be described by the side that moves data.
  std::vector<int> v(up, rank);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v.data(), 1, MPI_INT, comm());
  EXPECT_THAT(dtl::trace::describe_self(), HasSubstr("MPI_Allgather(4 B)"));
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

TEST(Checks, CloseToNamesTheIndexPerDimensionWhenGivenTheShape) {
  std::vector<double> want(2 * 3 * 4, 1.0), got = want;
  got[17] = 5.0;  // [1, 1, 1] of 2 x 3 x 4
  const auto shaped = dtl::testing::close_to(want, got, "y", {}, "the oracle", 0, {2, 3, 4});
  EXPECT_FALSE(shaped);
  EXPECT_THAT(shaped.message(), HasSubstr(": y[17] (at [1, 1, 1] of 2 x 3 x 4) expected 1 (the oracle) got 5"));
  // No shape, or one that does not describe the values: the flat index alone.
  for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{5, 5}}) {
    const auto flat = dtl::testing::close_to(want, got, "y", {}, "the oracle", 0, shape);
    EXPECT_THAT(flat.message(), HasSubstr(": y[17] expected 1 (the oracle) got 5"));
  }
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

// An operation that completes once `done` is set (by the test, not by a clock).
class Switch final : public dtl::WorkImpl {
 public:
  explicit Switch(const bool* done) : dtl::WorkImpl("switch"), done_(done) {}
  bool test() override { return *done_; }
  bool wait_until(double) override { return *done_; }

 private:
  const bool* done_;
};

// An EarlyWaitWork over a Switch, "too early" always, counting its reports.
struct Watched {
  bool done = false;
  int reports = 0;
  dtl::Work work;
  Watched() {
    dtl::OpInfo info;
    info.description = "watched";
    work = dtl::Work(std::make_unique<dtl::testing::EarlyWaitWork>(dtl::Work(std::make_unique<Switch>(&done), 0), info,
                                                                   [] { return true; }, [this] { ++reports; }),
                     0);
  }
};

// Note [A spin is a wait]: kSpinPolls polls of one operation in a row are a spin.
TEST(EarlyWait, PollsInARowAreASpinAndTheAnswerComesAfterThem) {
  constexpr int kSpin = dtl::testing::EarlyWaitWork::kSpinPolls;
  Watched a;
  a.done = true;
  int polls = 1;
  while (!a.work.test()) ++polls;
  EXPECT_EQ(polls, kSpin) << "\"not yet\" for the first kSpinPolls - 1 polls, then the true answer";
  EXPECT_GE(a.reports, 1) << "kSpinPolls polls in a row while too early: a spin";
  Watched b;
  b.work.wait_for(0.001);
  EXPECT_EQ(b.reports, 1) << "a wait while too early is reported";
}

// Polls interleaved with polls of another operation are not a spin on either, and
// never hang: a loop that waits for its own operation and polls another meanwhile.
TEST(EarlyWait, InterleavedPollsAreNotASpinAndStillEnd) {
  constexpr int kSpin = dtl::testing::EarlyWaitWork::kSpinPolls;
  Watched own, other;
  own.done = other.done = true;
  int polls = 0;
  while (!own.work.test()) {
    ++polls;
    (void)other.work.test();
  }
  EXPECT_EQ(polls, kSpin - 1);
  EXPECT_EQ(own.reports, 0);
  EXPECT_EQ(other.reports, 0);
  // A spin that starts after interleaved polls is still seen.
  Watched late;
  Watched cut;
  for (int i = 0; i < 10; ++i) {
    (void)late.work.test();
    (void)cut.work.test();
  }
  for (int i = 0; i < kSpin; ++i) (void)late.work.test();
  EXPECT_GE(late.reports, 1);
  EXPECT_EQ(cut.reports, 0);
}

}  // namespace
