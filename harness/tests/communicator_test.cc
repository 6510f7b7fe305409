// Tests of the Communicator backends (harness/comm/): every collective against
// Open MPI's own (the oracle), the Work contract (wait on destruction, errors and
// timeouts that name the operation), the alpha-beta emulator against its closed
// form, and the Chrome-trace timeline. One test measures overlap and prints it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/comm/threaded_communicator.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"

namespace {

using ::testing::HasSubstr;
using dtl::CollectiveKind;
using dtl::Communicator;
using dtl::ReduceOp;
using dtl::Work;
using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::type_name;
using dtl::testing::values;

// ---------------------------------------------------------------------------
// Backends under test
// ---------------------------------------------------------------------------

enum class Backend { kNonblocking, kThread, kPolling, kEmulated };
const Backend kBackends[] = {Backend::kNonblocking, Backend::kThread, Backend::kPolling, Backend::kEmulated};

// A fast emulated link, so that the correctness sweep stays quick.
std::unique_ptr<Communicator> make(Backend backend) {
  switch (backend) {
    case Backend::kNonblocking: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kNonblocking);
    case Backend::kThread: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread);
    case Backend::kPolling: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kPolling);
    case Backend::kEmulated:
      return std::make_unique<dtl::EmulatedCommunicator>(
          std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread),
          dtl::parse_link("alpha=1us,bw=100GB/s"));
  }
  return nullptr;
}

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
    auto c = make(backend);
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
    auto c = make(backend);
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
    auto c = make(backend);
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
    auto c = make(backend);
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
    auto c = make(backend);
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
    auto c = make(backend);
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
  auto c = make(Backend::kThread);
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
  auto c = make(Backend::kThread);
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

// ---------------------------------------------------------------------------
// The alpha-beta emulator
// ---------------------------------------------------------------------------

TEST(LinkModel, FormulasMatchTheClosedForm) {
  const dtl::LinkModel link{"test", 1e-3, 1e9};  // 1 ms, 1 GB/s
  const std::size_t n = 8'000'000;                // 8 MB
  // P = 4: a ring step moves n/P = 2 MB in 2 ms, plus alpha.
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 4), 6 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kReduceScatter, n, 4), 3 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllgather, n, 4), 3 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kBroadcast, n, 4), 2 * (1e-3 + 8e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kBroadcast, n, 3), 2 * (1e-3 + 8e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 2), 2 * (1e-3 + 4e-3));
  EXPECT_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 1), 0.0);
}

TEST(LinkModel, PresetsAndParsing) {
  const auto ten = dtl::link_by_name("10gbe");
  EXPECT_EQ(ten.name, "10GbE");
  EXPECT_DOUBLE_EQ(ten.bytes_per_second, 1.25e9);
  for (const auto& name : dtl::link_names()) EXPECT_EQ(dtl::link_by_name(name).name, name);
  EXPECT_DOUBLE_EQ(dtl::link_by_name("NVLink4").bytes_per_second, 450e9);

  const auto custom = dtl::parse_link("alpha=5us,bw=10GB/s");
  EXPECT_DOUBLE_EQ(custom.alpha_seconds, 5e-6);
  EXPECT_DOUBLE_EQ(custom.bytes_per_second, 1e10);
  EXPECT_DOUBLE_EQ(dtl::parse_link("alpha=2ms, bw=8Gb/s").bytes_per_second, 1e9);  // bits
  EXPECT_DOUBLE_EQ(dtl::parse_link("bw=100Gbps").bytes_per_second, 12.5e9);
  EXPECT_DOUBLE_EQ(dtl::parse_link("bw=1GiB/s").bytes_per_second, 1073741824.0);
  EXPECT_DOUBLE_EQ(dtl::parse_link("alpha=2ms,bw=1MB/s").alpha_seconds, 2e-3);
  EXPECT_EQ(dtl::parse_link("100GbE").name, "100GbE");

  try {
    dtl::link_by_name("carrier-pigeon");
    ADD_FAILURE() << "an unknown link should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'carrier-pigeon', not a known link; known: 1GbE, 10GbE, 25GbE"));
  }
  EXPECT_THROW(dtl::parse_link("alpha=5 parsecs,bw=1GB/s"), dtl::InvalidArgument);
  EXPECT_THROW(dtl::parse_link("alpha=5us"), dtl::InvalidArgument);
  EXPECT_THROW(dtl::parse_link("beta=5us,bw=1GB/s"), dtl::InvalidArgument);
}

// A slow link, so that model times (milliseconds) dwarf the clock's resolution.
std::unique_ptr<dtl::EmulatedCommunicator> slow_emulator() {
  return std::make_unique<dtl::EmulatedCommunicator>(
      std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), dtl::parse_link("alpha=1ms,bw=200MB/s"));
}

// The upper bound is loose on purpose: a 2-core machine running 4 ranks is noisy.
constexpr double kLateSlack = 1.0;  // seconds

TEST(Emulator, CompletesNoEarlierThanTheModelAndNotMuchLater) {
  auto c = slow_emulator();
  EXPECT_THAT(c->name(), HasSubstr("emulated alpha=1ms,bw=200MB/s"));
  const int rank = comm().rank();
  std::ostringstream report;
  report << "[dtl] emulator accuracy on " << c->link().describe() << ", P = " << comm().size()
         << " (this rank's Work, end - start):\n";
  for (std::size_t n : {std::size_t{0}, std::size_t{1000}, std::size_t{1u << 18}}) {
    std::vector<float> buf = values<float>(n, rank), expected(n);
    MPI_Allreduce(buf.data(), expected.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm());
    const double model = dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, n * 4, comm().size());
    Work w = c->allreduce(std::span<float>(buf));
    EXPECT_THAT(w.description(), HasSubstr("on emulated"));
    w.wait();
    const double now = dtl::clock_seconds();
    EXPECT_TRUE(buffers_equal(expected, buf, "emulated allreduce n=" + std::to_string(n)));
    EXPECT_GE(w.end_seconds() - w.start_seconds(), model - 1e-9) << "n=" << n;
    EXPECT_GE(now - w.issue_seconds(), model - 1e-9) << "wait() returned before the model's time, n=" << n;
    EXPECT_LE(w.end_seconds() - w.start_seconds(), model + kLateSlack) << "n=" << n;
    char line[160];
    std::snprintf(line, sizeof line, "  allreduce %9s  model %8.3f ms  emulated %8.3f ms  (+%.3f ms)\n",
                  dtl::format_bytes(n * 4).c_str(), model * 1e3, (w.end_seconds() - w.start_seconds()) * 1e3,
                  (w.end_seconds() - w.start_seconds() - model) * 1e3);
    report << line;
  }
  if (rank == 0) std::cout << report.str() << std::flush;
}

TEST(Emulator, SerializesOperationsFifoAsOnOneLink) {
  auto c = slow_emulator();
  const int rank = comm().rank();
  const std::size_t sizes[] = {1u << 16, 1000, 1u << 17};
  std::vector<std::vector<float>> bufs;
  for (std::size_t n : sizes) bufs.push_back(values<float>(n, rank));
  const double first_issue = dtl::clock_seconds();
  std::vector<Work> works;
  for (auto& b : bufs) works.push_back(c->allreduce(std::span<float>(b)));
  // Reduce-scatter and allgather take the link after the allreduces.
  const std::size_t block = 5000;
  const auto send = values<float>(block * static_cast<std::size_t>(comm().size()), rank);
  std::vector<float> shard(block), gathered(send.size());
  works.push_back(c->reduce_scatter(std::span<const float>(send), std::span<float>(shard)));
  works.push_back(c->allgather(std::span<const float>(shard), std::span<float>(gathered)));
  for (auto& w : works) w.wait();
  const double elapsed = dtl::clock_seconds() - first_issue;

  const int p = comm().size();
  std::vector<double> model;
  for (std::size_t n : sizes) model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, n * 4, p));
  model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kReduceScatter, send.size() * 4, p));
  model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kAllgather, gathered.size() * 4, p));
  double total = 0;
  for (std::size_t i = 0; i < works.size(); ++i) {
    total += model[i];
    EXPECT_GE(works[i].end_seconds() - works[i].start_seconds(), model[i] - 1e-9) << "op " << i;
    if (i > 0) {
      // The link is busy until the previous operation's model time is over.
      EXPECT_GE(works[i].start_seconds(), works[i - 1].start_seconds() + model[i - 1] - 1e-9) << "op " << i;
    }
  }
  EXPECT_GE(elapsed, total - 1e-9) << "FIFO: the operations cannot share the link";
  EXPECT_LE(elapsed, total + kLateSlack);
}

// The point of the emulator: the model's time passes while the caller works, on
// no core. "Compute" is a sleep here so that the check holds on a loaded machine.
TEST(Emulator, OverlapsWithTheCallersWork) {
  // A link so slow (alpha 100 ms) that the model dwarfs the real 64 KiB allreduce
  // even on a loaded machine: run one after the other, the two would take 2x the model.
  auto c = std::make_unique<dtl::EmulatedCommunicator>(
      std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), dtl::parse_link("alpha=100ms,bw=10MB/s"));
  std::vector<float> buf = values<float>(1u << 14, comm().rank());
  const double model = dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, buf.size() * 4, comm().size());
  const double compute = std::max(model, 0.01);
  const double begin = dtl::clock_seconds();
  Work w = c->allreduce(std::span<float>(buf));
  std::this_thread::sleep_for(std::chrono::duration<double>(compute));
  w.wait();
  const double both = dtl::clock_seconds() - begin;
  EXPECT_GE(both, std::max(model, compute) - 1e-9);
  EXPECT_LT(both, compute + model * 0.5 + 0.01) << "the emulated allreduce did not overlap the caller's work";
}

// ---------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------

bool python_parses_json(const std::string& path, const std::string& check) {
  const std::string command = "python3 -c \"import json,sys; t=json.load(open(sys.argv[1])); " + check +
                              "\" " + path + " > /dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

TEST(Timeline, WritesValidChromeTraceWithSpansInOrder) {
  dtl::Timeline timeline(comm().rank());
  timeline.add("compute", "backward \"layer\" 2\n", 10.002, 10.003, {{"bytes", "4 KiB"}});
  timeline.add("compute", "backward layer 3", 10.000, 10.001);
  timeline.add("comm", "bucket 0", 10.0015, 10.004);
  EXPECT_THROW(timeline.add("comm", "backwards", 2.0, 1.0), dtl::InvalidArgument);
  const std::string json = timeline.to_json();
  // Sorted by begin: layer 3 (ts 0), bucket 0 (ts 1500 us), layer 2 (ts 2000 us).
  const auto a = json.find("backward layer 3"), b = json.find("bucket 0"), d = json.find("backward \\\"layer\\\" 2\\n");
  EXPECT_NE(d, std::string::npos) << json;
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
  EXPECT_THAT(json, HasSubstr("\"ts\":1500.000,\"dur\":2500.000"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"thread_name\",\"args\":{\"name\":\"comm\"}"));

  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("dtl_timeline_" + std::to_string(::getpid()) + ".json")).string();
  timeline.write(path);
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(python_parses_json(path, "e=[x for x in t['traceEvents'] if x['ph']=='X']; "
                                         "assert [x['ts'] for x in e]==sorted(x['ts'] for x in e); assert len(e)==3"))
        << json;
  }
  std::filesystem::remove(path);
}

TEST(Timeline, RecordsWorkAndMergesRanks) {
  auto c = make(Backend::kThread);
  dtl::Timeline timeline(comm().rank());
  std::vector<float> buf(1 << 16, 1.0f);
  Work w = c->allreduce(std::span<float>(buf));
  {
    dtl::Timeline::Scope scope(timeline, "compute", "busy");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_THROW(timeline.add_work("comm", w), dtl::InvalidArgument);  // not waited for: no end time yet
  w.wait();
  timeline.add_work("comm", w, "bucket 0");
  EXPECT_EQ(timeline.spans().size(), 2u);
  EXPECT_EQ(timeline.spans()[1].name, "bucket 0");
  EXPECT_EQ(timeline.spans()[1].args.at("description"), w.description());

  // Every rank gets the same path from rank 0.
  char path[512] = {};
  if (comm().rank() == 0) {
    const auto file = std::filesystem::temp_directory_path() / ("dtl_merged_" + std::to_string(::getpid()) + ".json");
    std::snprintf(path, sizeof path, "%s", file.c_str());
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, comm());
  timeline.write_gathered(comm(), path);
  if (comm().rank() == 0) {
    if (std::system("python3 -c 'import json' > /dev/null 2>&1") == 0) {
      EXPECT_TRUE(python_parses_json(
          path, "assert len({x['pid'] for x in t['traceEvents'] if x['ph']=='X'})==" + std::to_string(comm().size()) +
                    "; assert min(x['ts'] for x in t['traceEvents'] if x['ph']=='X')==0"));
    }
    std::filesystem::remove(path);
  }
}

// ---------------------------------------------------------------------------
// Overlap, measured (figures printed by rank 0; see harness/README.md)
// ---------------------------------------------------------------------------

// Arithmetic on a private array: memory-bound like a backward pass, no MPI.
double compute(std::vector<float>& scratch, int repeats) {
  double sum = 0;
  for (int r = 0; r < repeats; ++r) {
    for (auto& x : scratch) x = x * 0.999f + 0.001f;
    sum += scratch[r % scratch.size()];
  }
  return sum;
}

double slowest(double seconds) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, comm());
  return max;
}

// Times fn on every rank after a barrier: the median of `reps` of the slowest rank's time.
template <typename F>
double timed(int reps, F&& fn) {
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(comm());
    const double begin = dtl::clock_seconds();
    fn();
    samples.push_back(slowest(dtl::clock_seconds() - begin));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

TEST(Overlap, MeasuresComputeWhileAllreduceInFlight) {
  // 4 MiB of f32 and 3 repetitions by default (quick, in ctest);
  // DTL_OVERLAP_MIB and DTL_OVERLAP_REPS for a longer measurement.
  const char* mib = std::getenv("DTL_OVERLAP_MIB");
  const char* reps_env = std::getenv("DTL_OVERLAP_REPS");
  const std::size_t count = (mib != nullptr ? std::strtoul(mib, nullptr, 10) : 4) * (std::size_t{1} << 18);
  const int reps = reps_env != nullptr ? std::atoi(reps_env) : 3;
  std::vector<float> grads = values<float>(count, comm().rank());
  std::vector<float> scratch(std::size_t{1} << 20, 1.0f);  // 4 MiB: one compute repeat
  volatile double sink = 0;
  // One compute repeat's time, to size the compute to each backend's allreduce.
  const double one = timed(3, [&] { sink = sink + compute(scratch, 20); }) / 20;

  std::ostringstream table;
  table << "[dtl] overlap of a " << dtl::format_bytes(count * 4) << " f32 allreduce with compute, P = "
        << comm().size() << " (medians of " << reps << " repetitions, slowest rank):\n"
        << "  backend                                                         comm ms  compute ms  both ms  overlap\n";
  const auto emulated_over = [&](const char* link, dtl::MpiMode mode) -> std::unique_ptr<Communicator> {
    return std::make_unique<dtl::EmulatedCommunicator>(std::make_unique<dtl::MpiCommunicator>(comm(), mode),
                                                       dtl::link_by_name(link));
  };
  std::vector<std::function<std::unique_ptr<Communicator>()>> backends = {
      [] { return make(Backend::kNonblocking); },
      [] { return make(Backend::kThread); },
      [] { return make(Backend::kPolling); },
      [&] { return emulated_over("10GbE", dtl::MpiMode::kThread); },
      [&] { return emulated_over("10GbE", dtl::MpiMode::kNonblocking); },
      [&] { return emulated_over("1GbE", dtl::MpiMode::kThread); },
      [&] { return emulated_over("1GbE", dtl::MpiMode::kNonblocking); }};
  for (const auto& make_backend : backends) {
    std::unique_ptr<Communicator> c = make_backend();
    grads = values<float>(count, comm().rank());  // each allreduce multiplies it by P: start afresh
    // Calibrate: as much compute as this backend's allreduce takes alone (warm),
    // where overlap matters most, and where the metric below is the most telling.
    const double warm = timed(3, [&] { c->allreduce(std::span<float>(grads)).wait(); });
    int repeats = static_cast<int>(std::clamp(warm / std::max(one, 1e-6), 1.0, 2000.0));
    MPI_Bcast(&repeats, 1, MPI_INT, 0, comm());
    // Each repetition times all three back to back, so that load from elsewhere
    // hits the three alike; the overlap is computed per repetition, then the median taken.
    std::vector<double> comms, computes, boths, overlaps;
    for (int rep = 0; rep < reps; ++rep) {
      comms.push_back(timed(1, [&] { c->allreduce(std::span<float>(grads)).wait(); }));
      computes.push_back(timed(1, [&] { sink = sink + compute(scratch, repeats); }));
      boths.push_back(timed(1, [&] {
        Work w = c->allreduce(std::span<float>(grads));
        sink = sink + compute(scratch, repeats);
        w.wait();
      }));
      // 1: the shorter of the two was hidden entirely; 0: they ran one after the other.
      overlaps.push_back((comms.back() + computes.back() - boths.back()) /
                         std::max(std::min(comms.back(), computes.back()), 1e-9));
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double t_comm = median(comms), t_compute = median(computes), t_both = median(boths);
    const double overlap = median(overlaps);
    char line[256];
    std::snprintf(line, sizeof line, "  %-62s %8.1f %11.1f %8.1f %7.0f%%\n", c->name().c_str(), t_comm * 1e3,
                  t_compute * 1e3, t_both * 1e3, overlap * 100);
    table << line;
    EXPECT_GT(t_both, 0.0);
    if (auto* emulated = dynamic_cast<dtl::EmulatedCommunicator*>(c.get())) {
      table << "    (emulated: " << emulated->late_operations()
            << " operation(s) ended later than the model: the real reduction was the slower)\n";
    }
  }
  if (comm().rank() == 0) std::cout << table.str() << std::flush;
}

}  // namespace
