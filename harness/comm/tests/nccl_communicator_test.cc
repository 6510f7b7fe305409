// dtl::NcclCommunicator against Open MPI's collectives on host copies, for
// every DType. NCCL needs one GPU per rank, so these tests skip together, saying
// why, on a machine without a GPU or with fewer GPUs than ranks on a host.
//
// The oracle: each rank's data is small integers, kept on the host as doubles;
// MPI_Allreduce (and friends) of MPI_DOUBLE computes the exact answer, which is
// then rounded once to the DType. Every value (sums of at most 8 ranks' values
// below 32, and their halves) is exact in f16 and bf16, so the comparison is
// bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/nccl_comm.h"
#include "harness/comm/nccl_communicator.h"
#include "harness/cuda/check.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/testing/mpi_test.h"

namespace {

using dtl::DType;
using dtl::ReduceOp;
using dtl::testing::comm;

constexpr DType kAllTypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kF16, DType::kBF16};
constexpr std::size_t kCounts[] = {0, 1, 7, 4099};

// ---------------------------------------------------------------------------
// Host values <-> the bytes of a DType
// ---------------------------------------------------------------------------

std::vector<std::byte> encode(DType dtype, const std::vector<double>& values) {
  std::vector<std::byte> bytes(values.size() * dtl::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* out = bytes.data() + i * dtl::dtype_size(dtype);
    const double v = values[i];
    switch (dtype) {
      case DType::kF32: { const float x = static_cast<float>(v); std::memcpy(out, &x, sizeof x); break; }
      case DType::kF64: { std::memcpy(out, &v, sizeof v); break; }
      case DType::kI32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(out, &x, sizeof x); break; }
      case DType::kF16: { const __half x = __float2half_rn(static_cast<float>(v)); std::memcpy(out, &x, sizeof x); break; }
      case DType::kBF16: { const __nv_bfloat16 x = __float2bfloat16_rn(static_cast<float>(v)); std::memcpy(out, &x, sizeof x); break; }
    }
  }
  return bytes;
}

std::vector<double> decode(DType dtype, const std::vector<std::byte>& bytes) {
  std::vector<double> values(bytes.size() / dtl::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::byte* in = bytes.data() + i * dtl::dtype_size(dtype);
    switch (dtype) {
      case DType::kF32: { float x; std::memcpy(&x, in, sizeof x); values[i] = x; break; }
      case DType::kF64: { std::memcpy(&values[i], in, sizeof(double)); break; }
      case DType::kI32: { std::int32_t x; std::memcpy(&x, in, sizeof x); values[i] = x; break; }
      case DType::kF16: { __half x; std::memcpy(&x, in, sizeof x); values[i] = __half2float(x); break; }
      case DType::kBF16: { __nv_bfloat16 x; std::memcpy(&x, in, sizeof x); values[i] = __bfloat162float(x); break; }
    }
  }
  return values;
}

// Small integers, different on every rank and element: (3i + 5 rank + 1) mod 29.
std::vector<double> rank_values(std::size_t count, int rank) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<double>((3 * i + 5 * static_cast<std::size_t>(rank) + 1) % 29);
  return v;
}

// The contract's kAvg: the exact sum divided once by P, integers truncating.
void average(std::vector<double>& sum, DType dtype, int world_size) {
  for (double& x : sum) x = dtype == DType::kI32 ? std::trunc(x / world_size) : x / world_size;
}

// NCCL's float average multiplies by 1/P before summing (see the class comment):
// bit-exact against the contract only when 1/P is exact, P a power of two.
bool avg_is_exact(DType dtype, int world_size) {
  return dtype == DType::kI32 || (world_size & (world_size - 1)) == 0;
}

std::string what(const char* op, DType dtype, std::size_t count, const char* extra = "") {
  return std::string(op) + " of " + std::to_string(count) + " x " + dtl::dtype_name(dtype) + extra;
}

// Device buffers filled and read back on the caller's compute stream, so that
// the communicator's event ordering is what makes the results right (no
// cudaDeviceSynchronize between the copies and the collectives).
class Device {
 public:
  explicit Device(cudaStream_t stream) : stream_(stream) {}
  dtl::cuda::DeviceBuffer upload(const std::vector<std::byte>& bytes) const {
    dtl::cuda::DeviceBuffer buf(bytes.size());
    if (!bytes.empty()) {
      DTL_CUDA_CHECK(cudaMemcpyAsync(buf.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    }
    return buf;
  }
  std::vector<std::byte> download(const void* data, std::size_t bytes) const {
    std::vector<std::byte> out(bytes);
    if (bytes > 0) DTL_CUDA_CHECK(cudaMemcpyAsync(out.data(), data, bytes, cudaMemcpyDeviceToHost, stream_));
    DTL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

 private:
  cudaStream_t stream_;
};

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

TEST(NcclCommunicator, RefusesTogetherWhenNcclCannotRun) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(p.nccl_ok, "NCCL can run here; this test checks the refusal");
  // Every rank throws, before any NCCL call, with the agreed reason.
  try {
    dtl::NcclCommunicator nccl(comm());
    ADD_FAILURE() << "NcclCommunicator was created although gpu_placement says: " << p.why_not;
  } catch (const dtl::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.why_not), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicator, AllreduceMatchesMpiForEveryDtype) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  const int rank = comm().rank(), size = comm().size();
  dtl::cuda::Stream compute;  // a stream of the caller's, not the default one
  dtl::NcclCommunicator nccl(comm(), compute.get());
  EXPECT_EQ(nccl.rank(), rank);
  EXPECT_EQ(nccl.world_size(), size);
  EXPECT_EQ(nccl.name(), "nccl");
  const Device device(compute.get());
  for (DType dtype : kAllTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && !avg_is_exact(dtype, size)) continue;
      for (std::size_t count : kCounts) {
        const std::vector<double> mine = rank_values(count, rank);
        std::vector<double> expected(count);
        MPI_Allreduce(mine.data(), expected.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm());
        if (op == ReduceOp::kAvg) average(expected, dtype, size);
        dtl::cuda::DeviceBuffer buf = device.upload(encode(dtype, mine));
        nccl.allreduce(buf.data(), count, dtype, op).wait();
        const auto got = decode(dtype, device.download(buf.data(), buf.bytes()));
        EXPECT_TRUE(dtl::testing::buffers_equal(decode(dtype, encode(dtype, expected)), got,
                                                what("allreduce", dtype, count, op == ReduceOp::kAvg ? " (avg)" : "")));
      }
    }
  }
}

TEST(NcclCommunicator, BroadcastMatchesMpiForEveryDtype) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  const int rank = comm().rank(), size = comm().size();
  dtl::NcclCommunicator nccl(comm());  // the legacy default stream computes
  const Device device(cudaStreamLegacy);
  for (DType dtype : kAllTypes) {
    for (std::size_t count : kCounts) {
      const int root = size - 1;
      std::vector<double> expected = rank_values(count, rank);
      const std::vector<double> mine = expected;
      MPI_Bcast(expected.data(), static_cast<int>(count), MPI_DOUBLE, root, comm());
      dtl::cuda::DeviceBuffer buf = device.upload(encode(dtype, mine));
      nccl.broadcast(buf.data(), count, dtype, root).wait();
      const auto got = decode(dtype, device.download(buf.data(), buf.bytes()));
      EXPECT_TRUE(dtl::testing::buffers_equal(expected, got, what("broadcast", dtype, count)));
    }
  }
}

TEST(NcclCommunicator, ReduceScatterMatchesMpiForEveryDtype) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  const int rank = comm().rank(), size = comm().size();
  dtl::cuda::Stream compute;
  dtl::NcclCommunicator nccl(comm(), compute.get());
  const Device device(compute.get());
  for (DType dtype : kAllTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && !avg_is_exact(dtype, size)) continue;
      for (std::size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          const std::vector<double> mine = rank_values(count * static_cast<std::size_t>(size), rank);
          std::vector<double> expected(count);
          MPI_Reduce_scatter_block(mine.data(), expected.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm());
          if (op == ReduceOp::kAvg) average(expected, dtype, size);
          dtl::cuda::DeviceBuffer send = device.upload(encode(dtype, mine));
          dtl::cuda::DeviceBuffer separate(count * dtl::dtype_size(dtype));
          // In place: the result lands in block `rank` of the input (NCCL's layout).
          void* recv = in_place && count > 0
                           ? static_cast<std::byte*>(send.data()) + count * dtl::dtype_size(dtype) * rank
                           : separate.data();
          nccl.reduce_scatter(send.data(), recv, count, dtype, op).wait();
          const auto got = decode(dtype, device.download(recv, count * dtl::dtype_size(dtype)));
          EXPECT_TRUE(dtl::testing::buffers_equal(decode(dtype, encode(dtype, expected)), got,
                                                  what("reduce_scatter", dtype, count, in_place ? " (in place)" : "")));
        }
      }
    }
  }
}

TEST(NcclCommunicator, AllgatherMatchesMpiForEveryDtype) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  const int rank = comm().rank(), size = comm().size();
  dtl::cuda::Stream compute;
  dtl::NcclCommunicator nccl(comm(), compute.get());
  const Device device(compute.get());
  for (DType dtype : kAllTypes) {
    for (std::size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        const std::vector<double> mine = rank_values(count, rank);
        std::vector<double> expected(count * static_cast<std::size_t>(size));
        MPI_Allgather(mine.data(), static_cast<int>(count), MPI_DOUBLE, expected.data(), static_cast<int>(count),
                      MPI_DOUBLE, comm());
        const std::size_t block_bytes = count * dtl::dtype_size(dtype);
        dtl::cuda::DeviceBuffer send = device.upload(encode(dtype, mine));
        // In place: this rank's block already sits at block `rank` of the output.
        std::vector<std::byte> recv_init(block_bytes * static_cast<std::size_t>(size));
        const auto own = encode(dtype, mine);
        if (in_place && !own.empty()) std::memcpy(recv_init.data() + block_bytes * rank, own.data(), own.size());
        dtl::cuda::DeviceBuffer recv = device.upload(recv_init);
        const void* input =
            in_place && count > 0 ? static_cast<const std::byte*>(recv.data()) + block_bytes * rank : send.data();
        nccl.allgather(input, recv.data(), count, dtype).wait();
        const auto got = decode(dtype, device.download(recv.data(), recv.bytes()));
        EXPECT_TRUE(dtl::testing::buffers_equal(expected, got,
                                                what("allgather", dtype, count, in_place ? " (in place)" : "")));
      }
    }
  }
}

TEST(NcclCommunicator, ManyOperationsInFlightCompleteInOrder) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  const int rank = comm().rank();
  dtl::cuda::Stream compute;
  dtl::NcclCommunicator nccl(comm(), compute.get());
  const Device device(compute.get());
  constexpr int kOps = 8;
  constexpr std::size_t kCount = 100003;
  std::vector<dtl::cuda::DeviceBuffer> bufs;
  std::vector<dtl::Work> works;
  for (int k = 0; k < kOps; ++k) bufs.push_back(device.upload(encode(DType::kF32, rank_values(kCount, rank + k))));
  for (int k = 0; k < kOps; ++k) works.push_back(nccl.allreduce(bufs[k].data(), kCount, DType::kF32, ReduceOp::kSum));
  for (int k = kOps - 1; k >= 0; --k) works[k].wait();  // any order of waits is fine
  for (int k = 0; k < kOps; ++k) {
    const std::vector<double> mine = rank_values(kCount, rank + k);
    std::vector<double> expected(kCount);
    MPI_Allreduce(mine.data(), expected.data(), static_cast<int>(kCount), MPI_DOUBLE, MPI_SUM, comm());
    const auto got = decode(DType::kF32, device.download(bufs[k].data(), bufs[k].bytes()));
    EXPECT_TRUE(dtl::testing::buffers_equal(expected, got, "allreduce #" + std::to_string(k)));
    EXPECT_GE(works[k].start_seconds(), works[k].issue_seconds());
    EXPECT_GE(works[k].end_seconds(), works[k].start_seconds());
  }
}

}  // namespace
