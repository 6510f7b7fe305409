// Lab 03, task G on the CPU: the ring across processes (src/ipc_ring.h) run by
// IpcRingHost, with the ranks' buffers in an MPI shared-memory window and each
// rank's "stream" a host thread. Oracle: MPI_Allreduce of float copies of the
// inputs (small integers: exact in every type, in any order).
//
// The slow-neighbour tests make some ranks' streams lag (HostDelay). A loop that
// omits one of the waits or agreements that Note [Cross-process hazards] calls
// for then reads a neighbour's chunk before it is written, or overwrites one
// before it is read, and fails every time rather than once in a while. That is
// how the first GPU run's bug (no entry handshake: wrong sums at 2-4 processes on
// an H100) is caught without a GPU.
//
// Task G2 (step flags, IpcSync::kFlags) runs the same cases: its loop queues
// everything and returns, so the slow ranks' streams lag the host by whole calls,
// and a missing signal or wait fails the same way (or, where a wait can never be
// met, ends as a reported deadlock after the stand-in's 10 s limit).
//
// These need the CUDA headers (for __half and __nv_bfloat16), not a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/testing/mpi_test.h"

#if DTL_LAB_HAS_CUDA
#include "gpu_test_util.h"
#include "lab03/ring_cuda.h"

namespace {

using namespace lab03_test;
using dtl::testing::comm;
namespace lab = dtl::lab03;

std::string what(std::size_t count, bool fuse, lab::IpcSync sync, const lab::HostDelay& delay = {}) {
  std::string text = "rank " + std::to_string(comm().rank()) + " of " + std::to_string(comm().size()) + ", count " +
                     std::to_string(count) + (fuse ? ", fused" : "") +
                     (sync == lab::IpcSync::kFlags ? ", step flags (G2)" : ", host handshakes (G)");
  if (delay.slow.count() > 0) text += ", slow ranks: " + std::string(delay.seed % 2 ? "even" : "odd");
  return text;
}

// No delays: empty, one element, fewer elements than ranks, counts not divisible
// by P, and a large one; several simulated kernel threads.
template <typename T>
void matches_mpi_allreduce(lab::IpcSync sync) {
  const auto up = static_cast<std::size_t>(comm().size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, up - 1, 7 * up + 3, std::size_t{100003}}) {
    for (bool fuse : {false, true}) {
      lab::IpcRingHost<T> ring(comm(), count, {}, 3);
      const Inputs<T> in = inputs<T>(count, comm().rank());
      ring.upload(in.mine);
      ring.allreduce(fuse, sync);
      EXPECT_TRUE(same_bits(in.want, ring.download(), what(count, fuse, sync)));
    }
  }
}

// Every rank of one parity lags by 15 ms per piece of work, its upload included;
// two allreduces run back to back on the same ring with different inputs, so the
// second upload lands right after the first allreduce returns. Each handshake of
// Note [Cross-process hazards] is then needed every time:
//  - entry: a fast rank's step 0 reads its slow left neighbour's input;
//  - each step: a fast rank's step s+1 reads what a slow neighbour writes at step s;
//  - exit: a slow left neighbour still writes (fused) or a slow right neighbour
//    still reads a fast rank's buffer when that rank returns and uploads again.
template <typename T>
void slow_neighbours_cannot_be_overtaken(lab::IpcSync sync) {
  const auto up = static_cast<std::size_t>(comm().size());
  for (unsigned seed : {0u, 1u}) {
    for (bool fuse : {false, true}) {
      const std::size_t count = 3 * up + 1;  // every chunk non-empty, one longer
      const lab::HostDelay delay{seed, std::chrono::milliseconds(15)};
      // Both rounds' oracles first: an MPI call between the rounds would be a
      // barrier, and would hide a missing exit handshake.
      const Inputs<T> in[2] = {inputs<T>(count, comm().rank()), inputs<T>(count, comm().rank() + 7)};
      lab::IpcRingHost<T> ring(comm(), count, delay);
      std::vector<T> got[2];
      for (int round = 0; round < 2; ++round) {
        ring.upload(in[round].mine);
        ring.allreduce(fuse, sync);
        got[round] = ring.download();
      }
      for (int round = 0; round < 2; ++round) {
        EXPECT_TRUE(
            same_bits(in[round].want, got[round], what(count, fuse, sync, delay) + ", round " + std::to_string(round)));
      }
    }
  }
}

// Task G2 only: three calls queued back to back, the host never waiting in
// between (no download: the next upload is queued right behind the last call's
// exit waits), then each call's sum read by a copy queued on the stream. The slow
// ranks' streams then run whole calls behind the fast ranks' hosts, and a flag
// value of one call that a later call could mistake for its own (the `call`
// argument unused) or a missing exit wait shows as a wrong sum.
template <typename T>
void calls_queued_back_to_back() {
  const auto up = static_cast<std::size_t>(comm().size());
  for (unsigned seed : {0u, 1u}) {
    for (bool fuse : {false, true}) {
      const std::size_t count = 2 * up + 3;
      const lab::HostDelay delay{seed, std::chrono::milliseconds(10)};
      const Inputs<T> in[3] = {inputs<T>(count, comm().rank()), inputs<T>(count, comm().rank() + 5),
                               inputs<T>(count, comm().rank() + 11)};
      lab::IpcRingHost<T> ring(comm(), count, delay);
      std::vector<T> got[3];
      for (int round = 0; round < 3; ++round) {
        got[round].resize(count);
        ring.upload(in[round].mine);
        ring.allreduce(fuse, lab::IpcSync::kFlags);
        ring.copy_out(got[round]);
      }
      ring.download();  // waits for the stream: every copy_out has run
      for (int round = 0; round < 3; ++round) {
        EXPECT_TRUE(same_bits(in[round].want, got[round],
                              what(count, fuse, lab::IpcSync::kFlags, delay) + ", call " + std::to_string(round) +
                                  " of 3 queued back to back"));
      }
    }
  }
}

// A launch that fails on one rank (the last rank's first) makes every rank's
// allreduce() throw, and leaves no stream waiting: each rank's stream finishes
// what was queued well within the stand-in's 10 s limit for a flag (task G2: the
// failed rank releases its neighbours with kFlagAbandoned).
template <typename T>
void a_failed_launch_makes_every_rank_throw(lab::IpcSync sync) {
  if (comm().size() == 1) {  // one rank has nothing to add up: no launch, nothing to fail
    lab::IpcRingHost<T> ring(comm(), 5);
    ring.fail_launch_after(0);
    EXPECT_NO_THROW(ring.allreduce(true, sync)) << what(5, true, sync);
    return;
  }
  for (bool fuse : {false, true}) {
    const std::size_t count = 3 * static_cast<std::size_t>(comm().size()) + 1;
    lab::IpcRingHost<T> ring(comm(), count, {0, std::chrono::milliseconds(10)});
    if (comm().rank() == comm().size() - 1) ring.fail_launch_after(0);
    ring.upload(inputs<T>(count, comm().rank()).mine);
    EXPECT_THROW(ring.allreduce(fuse, sync), dtl::Error) << what(count, fuse, sync);
    const auto start = std::chrono::steady_clock::now();
    try {
      ring.download();  // the streams end; what they hold is not a sum
    } catch (const dtl::Error& e) {
      ADD_FAILURE() << what(count, fuse, sync) << ": the stream failed after the launch failure: " << e.what();
    }
    const auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(waited, 5.0) << what(count, fuse, sync) << ": the stream waited " << waited
                            << " s after another rank's launch failed";
    if (sync == lab::IpcSync::kFlags) {  // the abandoned flags would meet every wait: no call may follow
      EXPECT_THROW(ring.allreduce(fuse, sync), dtl::Error) << what(count, fuse, sync) << ", after the failed call";
    }
  }
}

template <typename T>
class IpcRingHost : public ::testing::Test {};
TYPED_TEST_SUITE(IpcRingHost, GpuTypes, TypeNames);
TYPED_TEST(IpcRingHost, MatchesMpiAllreduce) { matches_mpi_allreduce<TypeParam>(lab::IpcSync::kHost); }
TYPED_TEST(IpcRingHost, SlowNeighboursCannotBeOvertaken) {
  slow_neighbours_cannot_be_overtaken<TypeParam>(lab::IpcSync::kHost);
}
TYPED_TEST(IpcRingHost, AFailedLaunchMakesEveryRankThrow) {
  a_failed_launch_makes_every_rank_throw<TypeParam>(lab::IpcSync::kHost);
}

// Task G2: the same, with step flags.
template <typename T>
class IpcRingHostFlags : public ::testing::Test {};
TYPED_TEST_SUITE(IpcRingHostFlags, GpuTypes, TypeNames);
TYPED_TEST(IpcRingHostFlags, MatchesMpiAllreduce) { matches_mpi_allreduce<TypeParam>(lab::IpcSync::kFlags); }
TYPED_TEST(IpcRingHostFlags, SlowNeighboursCannotBeOvertaken) {
  slow_neighbours_cannot_be_overtaken<TypeParam>(lab::IpcSync::kFlags);
}
TYPED_TEST(IpcRingHostFlags, CallsQueuedBackToBack) { calls_queued_back_to_back<TypeParam>(); }
TYPED_TEST(IpcRingHostFlags, AFailedLaunchMakesEveryRankThrow) {
  a_failed_launch_makes_every_rank_throw<TypeParam>(lab::IpcSync::kFlags);
}

TEST(IpcRingHostArgs, RejectsBadArguments) {
  EXPECT_THROW(lab::IpcRingHost<float>(comm(), 4, {}, 0), dtl::InvalidArgument);
  lab::IpcRingHost<float> ring(comm(), 4);
  const std::vector<float> three(3);
  EXPECT_THROW(ring.upload(three), dtl::InvalidArgument);
}

}  // namespace
#else
TEST(IpcRingHost, NeedsCudaHeaders) {
  GTEST_SKIP() << "this build has no CUDA (DTL_LAB_HAS_CUDA is not set: nvcc not found or "
                  "CMAKE_CUDA_COMPILER unset), so part 2's host tests cannot be compiled";
}
#endif  // DTL_LAB_HAS_CUDA
