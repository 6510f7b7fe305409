// Lab 03, part 2 on a GPU: the reduce-copy kernel against the host loop, the
// virtual ring against the host sum, the IPC ring against MPI_Allreduce of the
// host copies, and NCCL's collectives against MPI's.
//
// Every test decides together whether to run (DTL_SKIP_IF_ANY): without a GPU
// (CI) all of them skip on every rank, saying why. The NCCL tests also skip when
// a host has fewer GPUs than ranks (NCCL refuses two ranks on one GPU before NCCL
// 2.30, and without NCCL_MULTI_RANK_GPU_ENABLE=1 after). Each rank uses device
// rank % GPUs, so several ranks may share one GPU for the IPC ring.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/testing/mpi_test.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"
#if DTL_HAVE_NCCL
#include "harness/comm/nccl_comm.h"
#endif

namespace {

using namespace lab03_test;
using dtl::testing::comm;
namespace lab = dtl::lab03;

// Skips on every rank unless every rank has a GPU; selects device rank % GPUs.
#define SKIP_WITHOUT_GPU()                                                      \
  std::string why_no_gpu;                                                       \
  const int gpus = dtl::cuda::gpu_count(&why_no_gpu);                           \
  DTL_SKIP_IF_ANY(gpus == 0, "no GPU on some rank: " + why_no_gpu);             \
  DTL_CUDA_CHECK(cudaSetDevice(comm().rank() % gpus))

// Host <-> device on the stream that uses the data, waited for: the one helper of
// harness/cuda/copy.h (see its Note [Copies beside non-blocking streams]).
template <typename T>
std::vector<T> to_host(const void* device, std::size_t count, cudaStream_t stream) {
  return dtl::cuda::download(static_cast<const T*>(device), count, stream);
}

template <typename T>
void to_device(void* device, const std::vector<T>& host, cudaStream_t stream) {
  dtl::cuda::upload(static_cast<T*>(device), std::span<const T>(host), stream);
}

// ---------------------------------------------------------------------------
// The reduce-copy kernel
// ---------------------------------------------------------------------------

template <typename T>
class ReduceCopyGpu : public ::testing::Test {};
TYPED_TEST_SUITE(ReduceCopyGpu, GpuTypes, TypeNames);

constexpr std::size_t kGuard = 16;

// One launch of the kernel at the given element offsets, checked (with the guard
// elements around dst and dst2) against the scalar loop on the host.
template <typename T>
::testing::AssertionResult check_launch(std::size_t count, std::size_t d, std::size_t a_off, std::size_t b_off,
                                        std::size_t d2, bool copy, bool fused, cudaStream_t stream) {
  const std::size_t n = count + 2 * kGuard;
  std::vector<T> a(n), b(n), dst(n, from_float<T>(-1000.0f)), dst2(n, from_float<T>(-2000.0f));
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = from_float<T>(static_cast<float>((i * 37) % 101) * 0.37f - 11.0f);
    b[i] = from_float<T>(static_cast<float>((i * 53) % 97) * 0.71f - 29.0f);
  }
  std::vector<T> want = dst, want2 = dst2;
  for (std::size_t i = 0; i < count; ++i) {
    const T v = copy ? a[a_off + i] : from_float<T>(to_float(a[a_off + i]) + to_float(b[b_off + i]));
    want[d + i] = v;
    if (fused) want2[d2 + i] = v;
  }
  dtl::cuda::DeviceBuffer da(n * sizeof(T)), db(n * sizeof(T)), ddst(n * sizeof(T)), ddst2(n * sizeof(T));
  to_device(da.data(), a, stream);
  to_device(db.data(), b, stream);
  to_device(ddst.data(), dst, stream);
  to_device(ddst2.data(), dst2, stream);
  lab::ReduceCopyArgs<T> args;
  args.dst = static_cast<T*>(ddst.data()) + d;
  args.dst2 = fused ? static_cast<T*>(ddst2.data()) + d2 : nullptr;
  args.a = static_cast<const T*>(da.data()) + a_off;
  args.b = copy ? nullptr : static_cast<const T*>(db.data()) + b_off;
  args.count = count;
  lab::reduce_copy(args, stream);
  DTL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the result is read on the host next
  const std::string what = "count " + std::to_string(count) + ", offsets dst " + std::to_string(d) + " a " +
                           std::to_string(a_off) + " b " + std::to_string(b_off) + " dst2 " + std::to_string(d2) +
                           (copy ? ", copy" : "") + (fused ? ", fused" : "");
  auto r = same_bits(want, to_host<T>(ddst.data(), n, stream), "dst (" + what + ")");
  if (!r) return r;
  return same_bits(want2, to_host<T>(ddst2.data(), n, stream), "dst2 (" + what + ")");
}

TYPED_TEST(ReduceCopyGpu, MatchesHostAtEveryOffset) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  dtl::cuda::Stream stream;
  for (std::size_t count : {0, 1, 3, 7, 8, 9, 1000}) {
    for (std::size_t d = 0; d < 8; ++d) {
      for (std::size_t a = 0; a < 8; ++a) {
        for (std::size_t b = 0; b < 8; ++b) {
          ASSERT_TRUE(check_launch<T>(count, kGuard + d, kGuard + a, kGuard + b, 0, false, false, stream.get()));
        }
      }
    }
  }
}

TYPED_TEST(ReduceCopyGpu, CopyFusedAndLargeCounts) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  dtl::cuda::Stream stream;
  for (std::size_t count : {0, 1, 3, 7, 8, 9, 1000, 1000003}) {
    for (std::size_t d : {0, 1, 3, 4, 7}) {
      EXPECT_TRUE(check_launch<T>(count, kGuard + d, kGuard + d, kGuard, kGuard + d, true, false, stream.get()));
      EXPECT_TRUE(check_launch<T>(count, kGuard + d, kGuard + d, kGuard + d, kGuard + d, false, true, stream.get()));
      EXPECT_TRUE(check_launch<T>(count, kGuard + d, kGuard + d, kGuard + d, kGuard + 2, false, true, stream.get()));
      EXPECT_TRUE(check_launch<T>(count, kGuard + d, kGuard + 1, kGuard + 2, 0, false, false, stream.get()));
    }
  }
}

// ---------------------------------------------------------------------------
// The virtual ring: P buffers on one GPU
// ---------------------------------------------------------------------------

template <typename T>
class VirtualRingGpu : public ::testing::Test {};
TYPED_TEST_SUITE(VirtualRingGpu, GpuTypes, TypeNames);

TYPED_TEST(VirtualRingGpu, MatchesHostSum) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  dtl::cuda::Stream stream;
  for (int p = 1; p <= 8; ++p) {
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, up - 1, 7 * up + 3, std::size_t{100003}}) {
      for (bool fuse : {false, true}) {
        std::vector<dtl::cuda::DeviceBuffer> bufs;
        std::vector<T*> ptrs;
        std::vector<T> sum(count);
        std::vector<std::vector<T>> inputs(up, std::vector<T>(count));
        for (std::size_t i = 0; i < count; ++i) {
          float s = 0;
          for (std::size_t r = 0; r < up; ++r) {
            inputs[r][i] = small_int<T>(i, static_cast<int>(r));
            s += to_float(inputs[r][i]);
          }
          sum[i] = from_float<T>(s);
        }
        for (std::size_t r = 0; r < up; ++r) {
          bufs.emplace_back(count * sizeof(T));
          to_device(bufs.back().data(), inputs[r], stream.get());
          ptrs.push_back(static_cast<T*>(bufs.back().data()));
        }
        lab::virtual_ring_allreduce<T>(ptrs, count, stream.get(), fuse);
        stream.synchronize();  // every step has run; the buffers are read on the host next
        for (std::size_t r = 0; r < up; ++r) {
          ASSERT_TRUE(same_bits(sum, to_host<T>(bufs[r].data(), count, stream.get()),
                                "virtual rank " + std::to_string(r) + " of " + std::to_string(p) + ", count " +
                                    std::to_string(count) + (fuse ? ", fused" : "")));
        }
      }
    }
  }
}

// The same loop captured into a CUDA Graph (given/virtual_ring_graph.cu): the
// graph holds one kernel per launch of the loop, and every run() re-reads the
// buffers, so new inputs written between runs give their new sum.
TYPED_TEST(VirtualRingGpu, GraphReplaysTheRing) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  dtl::cuda::Stream stream;
  for (int p = 1; p <= 6; ++p) {
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, up - 1, 7 * up + 3, std::size_t{100003}}) {
      for (bool fuse : {false, true}) {
        const std::string what = "graph, " + std::to_string(p) + " buffers, count " + std::to_string(count) +
                                 (fuse ? ", fused" : "");
        std::vector<dtl::cuda::DeviceBuffer> bufs;
        std::vector<T*> ptrs;
        for (std::size_t r = 0; r < up; ++r) {
          bufs.emplace_back(count * sizeof(T));
          ptrs.push_back(static_cast<T*>(bufs.back().data()));
        }
        lab::VirtualRingGraph<T> graph(ptrs, count, stream.get(), fuse);
        if (p == 1 || count == 0) {
          EXPECT_EQ(graph.kernels(), 0u) << what;
        } else if (count >= up) {  // every chunk has elements: one launch per step
          EXPECT_EQ(graph.kernels(), 2 * up - (fuse ? 3 : 2)) << what;
        }
        for (int round = 0; round < 2; ++round) {  // the second round: other inputs, the same graph
          std::vector<T> sum(count);
          for (std::size_t i = 0; i < count; ++i) {
            float total = 0;
            for (std::size_t r = 0; r < up; ++r) total += to_float(small_int<T>(i + round, static_cast<int>(r)));
            sum[i] = from_float<T>(total);
          }
          for (std::size_t r = 0; r < up; ++r) {
            std::vector<T> input(count);
            for (std::size_t i = 0; i < count; ++i) input[i] = small_int<T>(i + round, static_cast<int>(r));
            to_device(bufs[r].data(), input, stream.get());
          }
          graph.run();
          stream.synchronize();
          for (std::size_t r = 0; r < up; ++r) {
            ASSERT_TRUE(same_bits(sum, to_host<T>(bufs[r].data(), count, stream.get()),
                                  what + ", round " + std::to_string(round) + ", virtual rank " + std::to_string(r)));
          }
        }
      }
    }
  }
}

// A loop that throws while it is captured (a null buffer) leaves the stream as it
// was: the error reaches the caller, and the stream still runs the ring.
TYPED_TEST(VirtualRingGpu, GraphCaptureErrorLeavesTheStreamUsable) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  dtl::cuda::Stream stream;
  dtl::cuda::DeviceBuffer a(4 * sizeof(T)), b(4 * sizeof(T));
  std::vector<T*> bad{static_cast<T*>(a.data()), nullptr};
  EXPECT_THROW(lab::VirtualRingGraph<T>(bad, 4, stream.get()), dtl::InvalidArgument);
  std::vector<T*> good{static_cast<T*>(a.data()), static_cast<T*>(b.data())};
  std::vector<T> ones(4, from_float<T>(1.0f)), twos(4, from_float<T>(2.0f));
  to_device(a.data(), ones, stream.get());
  to_device(b.data(), ones, stream.get());
  lab::virtual_ring_allreduce<T>(good, 4, stream.get());
  EXPECT_TRUE(same_bits(twos, to_host<T>(b.data(), 4, stream.get()), "after a failed capture"));
}

// ---------------------------------------------------------------------------
// The IPC ring: one buffer per process
// ---------------------------------------------------------------------------

template <typename T>
class IpcRingGpu : public ::testing::Test {};
TYPED_TEST_SUITE(IpcRingGpu, GpuTypes, TypeNames);

TYPED_TEST(IpcRingGpu, MatchesMpiAllreduce) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const int rank = comm().rank(), size = comm().size();
  const auto up = static_cast<std::size_t>(size);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, up - 1 + (size == 1), 7 * up + 3, std::size_t{100003},
                            std::size_t{1} << 20}) {
    for (bool fuse : {false, true}) {
      // Every rank reaches every collective below, whatever the checks find
      // (EXPECT, never ASSERT, before a collective).
      lab::IpcRing<T> ring(comm(), count, rank % gpus);
      const Inputs<T> in = inputs<T>(count, rank);
      to_device(ring.data(), in.mine, ring.stream());
      ring.allreduce(fuse);
      EXPECT_TRUE(same_bits(in.want, to_host<T>(ring.data(), count, ring.stream()),
                            "rank " + std::to_string(rank) + ", count " + std::to_string(count) +
                                (fuse ? ", fused" : "")));
      // The ring's destructor (collective) closes the mappings and waits for every
      // rank before freeing; this barrier only keeps the cases apart in time.
      MPI_Barrier(comm());
    }
  }
}

// The step flags' waits depend on other processes: a wait that is never met (a
// bug, or stream memory operations that do not work across processes sharing a
// GPU) would block every rank's host forever and eat the GPU session. So each call
// gets 20 s, then the job ends with what happened.
void finish_within_or_abort(cudaStream_t stream, const std::string& what) {
  if (dtl::cuda::synchronize_within(stream, 20.0)) return;
  std::fprintf(stderr, "rank %d: %s: the ring's stream did not finish within 20 s: a step-flag wait was never met; "
               "aborting the job\n", comm().rank(), what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 3);
}

// Task G2 on the GPU: step flags as cuStreamWriteValue64/cuStreamWaitValue64
// (IpcSync::kFlags). Two calls per ring, each uploaded and read back on the
// ring's stream. A rank's read-back waits for its own stream only, so what it
// reads, and its next upload, are ordered after its neighbours' work by nothing
// but the flags (the loop's one agreement per call orders the hosts, not the
// GPU). Not graded (task G2's points come from the CPU stand-in,
// IpcRingHostFlags/*): this checks the given GPU half of it.
template <typename T>
class IpcRingFlagsGpu : public ::testing::Test {};
TYPED_TEST_SUITE(IpcRingFlagsGpu, GpuTypes, TypeNames);

TYPED_TEST(IpcRingFlagsGpu, MatchesMpiAllreduceTwiceInARow) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const int rank = comm().rank(), size = comm().size();
  const auto up = static_cast<std::size_t>(size);
  for (std::size_t count : {std::size_t{1}, up - 1 + (size == 1), 7 * up + 3, std::size_t{100003},
                            std::size_t{1} << 20}) {
    for (bool fuse : {false, true}) {
      lab::IpcRing<T> ring(comm(), count, rank % gpus);
      // Both oracles first: no MPI call between the calls.
      const Inputs<T> in[2] = {inputs<T>(count, rank), inputs<T>(count, rank + 7)};
      for (int round = 0; round < 2; ++round) {
        const std::string what = "rank " + std::to_string(rank) + ", count " + std::to_string(count) +
                                 (fuse ? ", fused" : "") + ", step flags, call " + std::to_string(round);
        to_device(ring.data(), in[round].mine, ring.stream());
        ring.allreduce(fuse, lab::IpcSync::kFlags);
        finish_within_or_abort(ring.stream(), what);
        EXPECT_TRUE(same_bits(in[round].want, to_host<T>(ring.data(), count, ring.stream()), what));
      }
      MPI_Barrier(comm());
    }
  }
}

// ---------------------------------------------------------------------------
// NCCL, the vendor: one GPU per rank
// ---------------------------------------------------------------------------

#if DTL_HAVE_NCCL
template <typename T>
class NcclGpu : public ::testing::Test {};
TYPED_TEST_SUITE(NcclGpu, GpuTypes, TypeNames);

#define SKIP_WITHOUT_NCCL()                                                          \
  const auto placement = dtl::gpu_placement(comm());                                 \
  DTL_SKIP_IF_ANY(!placement.nccl_ok, "NCCL cannot run these ranks: " + placement.why_not)

// All three collectives on one communicator (creating one costs ~100 ms), each
// against MPI on float copies of the host data (exact: small integers).
TYPED_TEST(NcclGpu, CollectivesMatchMpi) {
  SKIP_WITHOUT_NCCL();
  using T = TypeParam;
  const int rank = comm().rank(), size = comm().size();
  const auto up = static_cast<std::size_t>(size);
  dtl::NcclComm nccl(comm(), placement.device);
  dtl::cuda::Stream stream;
  for (std::size_t block : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
    const std::size_t count = block * up;
    std::vector<T> mine(count);
    std::vector<float> mine_f(count), sum_f(count);
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = small_int<T>(i, rank);
      mine_f[i] = to_float(mine[i]);
    }
    MPI_Allreduce(mine_f.data(), sum_f.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm());
    std::vector<T> sum(count);
    for (std::size_t i = 0; i < count; ++i) sum[i] = from_float<T>(sum_f[i]);
    dtl::cuda::DeviceBuffer send(count * sizeof(T)), recv(count * sizeof(T));
    to_device(send.data(), mine, stream.get());
    const std::string what = "count " + std::to_string(count) + " on rank " + std::to_string(rank);

    lab::nccl_allreduce<T>(nccl, static_cast<const T*>(send.data()), static_cast<T*>(recv.data()), count,
                           stream.get());
    stream.synchronize();
    EXPECT_TRUE(same_bits(sum, to_host<T>(recv.data(), count, stream.get()), "ncclAllReduce, " + what));

    lab::nccl_reduce_scatter<T>(nccl, static_cast<const T*>(send.data()), static_cast<T*>(recv.data()), block,
                                stream.get());
    stream.synchronize();
    const std::vector<T> my_block(sum.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank)),
                                  sum.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank + 1)));
    EXPECT_TRUE(same_bits(my_block, to_host<T>(recv.data(), block, stream.get()), "ncclReduceScatter, " + what));

    // Allgather: rank r contributes block r of its own data.
    to_device(send.data(), std::vector<T>(mine.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank)),
                                          mine.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank + 1))), stream.get());
    std::vector<float> gathered_f(count), my_block_f(mine_f.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank)),
                                                     mine_f.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(rank + 1)));
    MPI_Allgather(my_block_f.data(), static_cast<int>(block), MPI_FLOAT, gathered_f.data(), static_cast<int>(block),
                  MPI_FLOAT, comm());
    std::vector<T> gathered(count);
    for (std::size_t i = 0; i < count; ++i) gathered[i] = from_float<T>(gathered_f[i]);
    lab::nccl_allgather<T>(nccl, static_cast<const T*>(send.data()), static_cast<T*>(recv.data()), block,
                           stream.get());
    stream.synchronize();
    EXPECT_TRUE(same_bits(gathered, to_host<T>(recv.data(), count, stream.get()), "ncclAllGather, " + what));
  }
}
#endif  // DTL_HAVE_NCCL

}  // namespace
