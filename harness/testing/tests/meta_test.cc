// Deliberately failing tests, run one at a time by check_test_main.py to show
// that the MPI test main reports failures on other ranks, agrees on the exit
// code, and turns a deadlock into a report of where each rank is blocked.
// They are DISABLED_ so that a plain run of this binary passes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/testing/mpi_test.h"

namespace {

using dtl::testing::comm;

TEST(Meta, Passes) { EXPECT_EQ(1 + 1, 2); }

// Every rank must be in the same test at the same time, even with
// --gtest_shuffle: each test checks that all ranks agree on its name.
void expect_all_ranks_in(const char* name) {
  const int id = static_cast<int>(std::hash<std::string>{}(name) % 100000);
  int low = 0, high = 0;
  MPI_Allreduce(&id, &low, 1, MPI_INT, MPI_MIN, comm());
  MPI_Allreduce(&id, &high, 1, MPI_INT, MPI_MAX, comm());
  EXPECT_EQ(low, high) << "rank " << comm().rank() << " is in " << name << " but another rank is not";
}
TEST(Order, A) { expect_all_ranks_in("A"); }
TEST(Order, B) { expect_all_ranks_in("B"); }
TEST(Order, C) { expect_all_ranks_in("C"); }
TEST(Order, D) { expect_all_ranks_in("D"); }
TEST(Order, E) { expect_all_ranks_in("E"); }
TEST(Order, F) { expect_all_ranks_in("F"); }

TEST(Meta, DISABLED_FailsOnLastRankOnly) {
  EXPECT_NE(comm().rank(), comm().size() - 1) << "failing on purpose";
}

// Every rank sends 1 MiB to its right neighbour before receiving: above the
// eager limit no send can complete, and no receive is ever posted.
TEST(Meta, DISABLED_NaiveRingDeadlocks) {
  const int rank = comm().rank();
  const int size = comm().size();
  std::vector<char> send(1 << 20, 'x'), recv(1 << 20);
  MPI_Send(send.data(), static_cast<int>(send.size()), MPI_CHAR, (rank + 1) % size, 5, comm());
  MPI_Recv(recv.data(), static_cast<int>(recv.size()), MPI_CHAR, (rank - 1 + size) % size, 5, comm(),
           MPI_STATUS_IGNORE);
}

// Rank 0 loops in its own code; the others finish the test and wait in the
// harness. A timeout, but not a deadlock.
TEST(Meta, DISABLED_RankZeroSpins) {
  if (comm().rank() == 0) {
    volatile bool forever = true;
    while (forever) {
    }
  }
}

// A communication thread and the main thread both blocked in MPI, forever: the
// report must say DEADLOCK and show both calls of every rank.
TEST(Meta, DISABLED_TwoThreadsBlocked) {
  const int rank = comm().rank();
  dtl::Comm thread_comm(comm().get());
  std::thread comm_thread([&] {
    int in = 0;
    MPI_Recv(&in, 1, MPI_INT, rank, 21, thread_comm, MPI_STATUS_IGNORE);  // never sent
  });
  int in = 0;
  MPI_Recv(&in, 1, MPI_INT, rank, 22, comm(), MPI_STATUS_IGNORE);  // never sent
  comm_thread.join();
}

TEST(Meta, DISABLED_ThrowsOnEveryRank) { throw std::runtime_error("thrown on purpose"); }

// Rank 0's set-up throws; the others wait for its broadcast, which never comes.
// The job must stop within seconds, leading with rank 0's exception.
TEST(Meta, DISABLED_SetUpThrowsOnRankZeroWhileOthersWait) {
  if (comm().rank() == 0) throw std::runtime_error("set-up failed on purpose on rank 0");
  int value = 0;
  MPI_Bcast(&value, 1, MPI_INT, 0, comm());
}

// The last rank gives up (a fatal assertion); the others wait for its message.
TEST(Meta, DISABLED_LastRankFailsWhileOthersWait) {
  const int last = comm().size() - 1;
  ASSERT_NE(comm().rank(), last) << "the last rank gives up on purpose";
  int value = 0;
  MPI_Recv(&value, 1, MPI_INT, last, 9, comm(), MPI_STATUS_IGNORE);
}

// Rank 0 fails at once; the others compute for 6 s and finish. They are working,
// not waiting for rank 0: the test must end normally, with rank 0's failure.
TEST(Meta, DISABLED_FailsWhileOthersCompute) {
  if (comm().rank() == 0) {
    ADD_FAILURE() << "rank 0 fails at once on purpose";
    return;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < end) x = x * 1.0000001;
}

// Every rank sends its neighbours messages nobody receives (a test's decoys), then
// throws, as a call under test does before it takes them. The next test must start
// and pass at once: see Note [Messages left in flight] in gtest_mpi_main.cc.
TEST(Meta, DISABLED_ThrowsWithMessagesInFlight) {
  const int rank = comm().rank(), size = comm().size();
  static std::vector<MPI_Request> leaked;  // as a test's decoys are when the call throws
  static const std::byte none{};
  for (int tag : {7, 8}) {
    for (int dest : {(rank + 1) % size, (rank + size - 1) % size}) {
      leaked.emplace_back();
      MPI_Isend(&none, 0, MPI_BYTE, dest, tag, comm(), &leaked.back());
    }
  }
  throw std::runtime_error("thrown on purpose with messages in flight");
}
TEST(Meta, DISABLED_StartsAfterMessagesInFlight) { EXPECT_TRUE(dtl::testing::all_ranks(true)); }

}  // namespace
