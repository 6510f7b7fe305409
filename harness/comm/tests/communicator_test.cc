// Tests of the Communicator backends (harness/comm/): every collective against
// Open MPI's own (the oracle), at every count worth sweeping, on every backend;
// the Work contract (wait on destruction, errors and timeouts that name the
// operation); the ThreadedCommunicator and the CommThread under it. The
// emulator's tests are in emulator_test.cc, the timeline's in timeline_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/threaded_communicator.h"
#include "harness/error.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"
#include "harness/comm/tests/backends_under_test.h"

namespace {

using ::testing::HasSubstr;
using dtl::Communicator;
using dtl::ReduceOp;
using dtl::Work;
using dtl::testing::Backend;
using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::kBackends;
using dtl::testing::make_backend;
using dtl::testing::type_name;
using dtl::testing::values;

// Counts worth sweeping: empty, one, fewer than ranks, not divisible by ranks, large.
std::vector<std::size_t> counts() {
  const auto p = static_cast<std::size_t>(comm().size());
  return {0, 1, p > 1 ? p - 1 : 2, 7 * p + 3, 100003};
}

template <typename T>
void expect_avg(std::vector<T>& sums) {
  for (auto& x : sums) x /= static_cast<T>(comm().size());
}

// ---------------------------------------------------------------------------
// Collectives against Open MPI's
// ---------------------------------------------------------------------------

TEST(Communicator, AllreduceMatchesMpiAllreduce) {
  const int rank = comm().rank();
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    dtl::testing::for_each_type([&](auto type) {
      using T = typename decltype(type)::type;
      for (std::size_t n : counts()) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          std::vector<T> buf = values<T>(n, rank), expected(n);
          const auto in = values<T>(n, rank);
          MPI_Allreduce(in.data(), expected.data(), static_cast<int>(n), dtl::mpi_datatype<T>(), MPI_SUM, comm());
          if (op == ReduceOp::kAvg) expect_avg(expected);
          c->allreduce(std::span<T>(buf), op).wait();
          EXPECT_TRUE(buffers_equal(expected, buf, c->name() + " allreduce " + dtl::reduce_op_name(op) + " " +
                                                       type_name<T>() + " n=" + std::to_string(n)));
        }
      }
    });
  }
}

TEST(Communicator, BroadcastMatchesMpiBcast) {
  const int rank = comm().rank();
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    dtl::testing::for_each_type([&](auto type) {
      using T = typename decltype(type)::type;
      for (int root : {0, comm().size() - 1}) {
        for (std::size_t n : counts()) {
          std::vector<T> buf = values<T>(n, rank), expected = values<T>(n, rank);
          MPI_Bcast(expected.data(), static_cast<int>(n), dtl::mpi_datatype<T>(), root, comm());
          c->broadcast_blocking(std::span<T>(buf), root);
          EXPECT_TRUE(buffers_equal(expected, buf, c->name() + " broadcast root " + std::to_string(root) + " " +
                                                       type_name<T>() + " n=" + std::to_string(n)));
        }
      }
    });
  }
}

TEST(Communicator, ReduceScatterMatchesMpiReduceScatterBlock) {
  const int rank = comm().rank();
  const auto p = static_cast<std::size_t>(comm().size());
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    dtl::testing::for_each_type([&](auto type) {
      using T = typename decltype(type)::type;
      for (std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          const auto send = values<T>(block * p, rank);
          std::vector<T> expected(block);
          MPI_Reduce_scatter_block(send.data(), expected.data(), static_cast<int>(block), dtl::mpi_datatype<T>(),
                                   MPI_SUM, comm());
          if (op == ReduceOp::kAvg) expect_avg(expected);
          const std::string what = c->name() + " reduce_scatter " + dtl::reduce_op_name(op) + " " + type_name<T>() +
                                   " block=" + std::to_string(block);
          std::vector<T> recv(block);
          c->reduce_scatter_blocking(std::span<const T>(send), std::span<T>(recv), op);
          EXPECT_TRUE(buffers_equal(expected, recv, what));
          // In place, NCCL's layout: the result lands in block `rank` of the input.
          std::vector<T> inout = send;
          c->reduce_scatter(inout.data(), inout.data() + block * static_cast<std::size_t>(rank), block,
                            dtl::dtype_of<T>(), op)
              .wait();
          const std::vector<T> got(inout.begin() + static_cast<std::ptrdiff_t>(block * rank),
                                   inout.begin() + static_cast<std::ptrdiff_t>(block * (rank + 1)));
          EXPECT_TRUE(buffers_equal(expected, got, what + " in place"));
        }
      }
    });
  }
}

TEST(Communicator, AllgatherMatchesMpiAllgather) {
  const int rank = comm().rank();
  const auto p = static_cast<std::size_t>(comm().size());
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    dtl::testing::for_each_type([&](auto type) {
      using T = typename decltype(type)::type;
      for (std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
        const auto send = values<T>(block, rank);
        std::vector<T> expected(block * p);
        MPI_Allgather(send.data(), static_cast<int>(block), dtl::mpi_datatype<T>(), expected.data(),
                      static_cast<int>(block), dtl::mpi_datatype<T>(), comm());
        const std::string what = c->name() + " allgather " + type_name<T>() + " block=" + std::to_string(block);
        std::vector<T> recv(block * p);
        c->allgather_blocking(std::span<const T>(send), std::span<T>(recv));
        EXPECT_TRUE(buffers_equal(expected, recv, what));
        std::vector<T> inout(block * p, T{-1});
        std::copy(send.begin(), send.end(), inout.begin() + static_cast<std::ptrdiff_t>(block * rank));
        c->allgather(inout.data() + block * static_cast<std::size_t>(rank), inout.data(), block, dtl::dtype_of<T>())
            .wait();
        EXPECT_TRUE(buffers_equal(expected, inout, what + " in place"));
      }
    });
  }
}

// Several operations in flight at once, waited for in reverse order: the
// backends match them by issue order, so each buffer gets its own result.
TEST(Communicator, ManyOperationsInFlightWaitedInAnyOrder) {
  const int rank = comm().rank();
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    constexpr int kOps = 6;
    std::vector<std::vector<float>> bufs, expected;
    for (int i = 0; i < kOps; ++i) {
      bufs.push_back(values<float>(1000 + 4096 * i, rank + i));
      expected.emplace_back(bufs.back().size());
      MPI_Allreduce(bufs.back().data(), expected.back().data(), static_cast<int>(bufs.back().size()), MPI_FLOAT,
                    MPI_SUM, comm());
    }
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) works.push_back(c->allreduce(std::span<float>(bufs[i])));
    for (int i = kOps - 1; i >= 0; --i) works[i].wait();
    for (int i = 0; i < kOps; ++i) {
      EXPECT_TRUE(buffers_equal(expected[i], bufs[i], c->name() + " op " + std::to_string(i)));
      EXPECT_THAT(works[i].description(), HasSubstr("allreduce #" + std::to_string(i)));
      EXPECT_GE(works[i].end_seconds(), works[i].start_seconds());
      EXPECT_GE(works[i].start_seconds(), works[i].issue_seconds());
    }
  }
}

TEST(Communicator, WorkDestroyedWithoutWaitIsWaitedFor) {
  const int rank = comm().rank();
  for (Backend backend : kBackends) {
    auto c = make_backend(backend);
    std::vector<double> buf = values<double>(50000, rank), expected(buf.size());
    MPI_Allreduce(buf.data(), expected.data(), static_cast<int>(buf.size()), MPI_DOUBLE, MPI_SUM, comm());
    { Work dropped = c->allreduce(std::span<double>(buf)); }  // no wait(): the destructor waits
    EXPECT_TRUE(buffers_equal(expected, buf, c->name() + " after the Work's destructor"));
    Work w = c->allreduce(std::span<double>(buf));
    w = Work();  // assigning over a pending Work waits for it too
    std::vector<double> twice = expected;
    MPI_Allreduce(expected.data(), twice.data(), static_cast<int>(buf.size()), MPI_DOUBLE, MPI_SUM, comm());
    EXPECT_TRUE(buffers_equal(twice, buf, c->name() + " after assigning over the Work"));
  }
}

TEST(Communicator, BadArgumentsThrowAtOnceNamingArgumentAndRank) {
  // Checked the same way on every rank, before any communication: all ranks throw together.
  auto c = make_backend(Backend::kThread);
  std::vector<float> buf(8);
  try {
    c->broadcast(std::span<float>(buf), comm().size());
    ADD_FAILURE() << "a root outside the communicator should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("broadcast: argument 'root'"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank())));
  }
  try {
    c->allreduce(buf.data(), 4, dtl::DType::kF16, ReduceOp::kSum);
    ADD_FAILURE() << "MpiCommunicator cannot add f16 yet";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("argument 'dtype' is f16"));
  }
  std::vector<float> small(1);
  try {
    c->allgather(std::span<const float>(buf), std::span<float>(small));
    ADD_FAILURE() << "a recv_buf of the wrong size should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("allgather: argument 'recv_buf'"));
  }
  try {
    c->allreduce(nullptr, 3, dtl::DType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "a null buffer should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("argument 'buf' is null"));
  }
  // f16 moves without arithmetic: a broadcast of 16-bit values works.
  std::vector<std::uint16_t> halves(5, static_cast<std::uint16_t>(comm().rank() == 0 ? 0x3c00 : 0));
  c->broadcast(halves.data(), halves.size(), dtl::DType::kF16, 0).wait();
  EXPECT_EQ(halves, std::vector<std::uint16_t>(5, 0x3c00));
}

TEST(Communicator, ThreadModeIsAvailableUnderTheTestMain) {
  EXPECT_TRUE(dtl::MpiCommunicator::thread_multiple_available());
  auto c = make_backend(Backend::kThread);
  EXPECT_EQ(c->name(), "mpi-thread");
  EXPECT_EQ(c->rank(), comm().rank());
  EXPECT_EQ(c->world_size(), comm().size());
}

// A lab's own blocking collective as a backend. The stand-in here is a naive
// allreduce (everyone's buffer to everyone, MPI_Allgather, summed locally);
// the oracle is the closed form: the sum of values<float>(n, r) over the ranks.
TEST(ThreadedCommunicator, RunsBlockingFunctionsAsABackend) {
  const int p = comm().size();
  dtl::BlockingCollectives ops;
  ops.allreduce = [](MPI_Comm c, void* buf, std::size_t count, dtl::DType dtype, ReduceOp op) {
    const int size = dtl::rank_and_size(c).size;
    EXPECT_EQ(dtype, dtl::DType::kF32);
    auto* x = static_cast<float*>(buf);
    std::vector<float> all(count * static_cast<std::size_t>(size));
    DTL_MPI_CHECK(
        MPI_Allgather(x, static_cast<int>(count), MPI_FLOAT, all.data(), static_cast<int>(count), MPI_FLOAT, c));
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < size; ++r) sum += all[static_cast<std::size_t>(r) * count + i];
      x[i] = op == ReduceOp::kAvg ? sum / static_cast<float>(size) : sum;
    }
  };
  ops.dtypes = {dtl::DType::kF32};
  dtl::ThreadedCommunicator c(comm(), "naive-allgather-sum", ops);
  EXPECT_EQ(c.name(), "naive-allgather-sum");
  for (std::size_t n : counts()) {
    std::vector<float> expected(n, 0.0f);
    for (int r = 0; r < p; ++r) {
      const auto v = values<float>(n, r);
      for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
    }
    std::vector<float> a = values<float>(n, comm().rank()), b = a;
    Work wa = c.allreduce(std::span<float>(a));
    Work wb = c.allreduce(std::span<float>(b));  // queued behind wa
    wb.wait();
    wa.wait();
    EXPECT_TRUE(buffers_equal(expected, a, "threaded allreduce n=" + std::to_string(n)));
    EXPECT_TRUE(buffers_equal(expected, b, "second threaded allreduce n=" + std::to_string(n)));
    EXPECT_GE(wb.start_seconds(), wa.end_seconds());
  }
  std::vector<float> buf(4);
  try {
    c.broadcast(std::span<float>(buf), 0);
    ADD_FAILURE() << "a collective the backend has no function for should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no broadcast function in backend 'naive-allgather-sum'"));
  }
  // A type outside ops.dtypes is refused by the issuing call, before the thread
  // sees it (the function above would EXPECT kF32 there).
  std::vector<double> doubles(4);
  try {
    c.allreduce(std::span<double>(doubles));
    ADD_FAILURE() << "a type outside ops.dtypes should throw when issued";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("f64 is not supported by backend 'naive-allgather-sum' (it takes f32)"));
  }
}

// ---------------------------------------------------------------------------
// The Work contract, on the communication thread alone (no MPI needed)
// ---------------------------------------------------------------------------

TEST(CommThread, RunsCallsInSubmissionOrder) {
  dtl::CommThread thread("test-thread");
  std::vector<int> order;
  std::vector<Work> works;
  for (int i = 0; i < 5; ++i) {
    works.emplace_back(thread.submit("call " + std::to_string(i),
                                     [&order, i] {
                                       std::this_thread::sleep_for(std::chrono::milliseconds(5 - i));
                                       order.push_back(i);
                                     }),
                       10.0);
  }
  for (auto& w : works) w.wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (std::size_t i = 1; i < works.size(); ++i) EXPECT_GE(works[i].start_seconds(), works[i - 1].end_seconds());
}

TEST(CommThread, WaitTimesOutNamingTheOperation) {
  dtl::CommThread thread("test-thread");
  Work w(thread.submit("allreduce #7 (sum, 4 x f32 = 16 B) on test-thread",
                       [] { std::this_thread::sleep_for(std::chrono::milliseconds(600)); }),
         0.05);
  try {
    w.wait();
    ADD_FAILURE() << "wait() should have timed out";
  } catch (const dtl::TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("allreduce #7 (sum, 4 x f32 = 16 B) on test-thread not complete after"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank())));
  }
  EXPECT_FALSE(w.test());
  w.wait(10.0);  // still pending after the timeout: a longer wait completes it
  EXPECT_TRUE(w.completed());
}

TEST(CommThread, ErrorsSurfaceInWaitWithTheOperationAndKeepTheirType) {
  dtl::CommThread thread("test-thread");
  Work w(thread.submit("broadcast #2 (root 0, 8 x f64 = 64 B) on test-thread",
                       [] { throw dtl::MpiError("MPI_Bcast failed [rank 0 of 1]", 17); }),
         10.0);
  try {
    w.wait();
    ADD_FAILURE() << "wait() should rethrow the call's error";
  } catch (const dtl::MpiError& e) {
    EXPECT_THAT(e.what(), HasSubstr("broadcast #2 (root 0, 8 x f64 = 64 B) on test-thread: MPI_Bcast failed"));
    EXPECT_EQ(e.code(), 17);
  }
  EXPECT_TRUE(w.completed());  // thrown once; the destructor does not report it again
}


}  // namespace
