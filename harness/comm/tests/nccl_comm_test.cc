// dtl::NcclComm: created from MPI, NCCL's collectives on it agree with MPI's.
// NCCL needs one GPU per rank, so the GPU tests skip together, saying why, on a
// machine without a GPU or with fewer GPUs than ranks on a host.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/comm/nccl_comm.h"
#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/testing/mpi_test.h"

namespace {

using dtl::testing::comm;

TEST(NcclComm, DatatypesMatchNccl) {
  static_assert(dtl::nccl_datatype<float>() == ncclFloat32);
  static_assert(dtl::nccl_datatype<__half>() == ncclFloat16);
  static_assert(dtl::nccl_datatype<__nv_bfloat16>() == ncclBfloat16);
  static_assert(dtl::nccl_datatype<std::int32_t>() == ncclInt32);
  EXPECT_EQ(dtl::nccl_datatype<double>(), ncclFloat64);
}

TEST(NcclComm, PlacementAgreesOnEveryRank) {
  const auto p = dtl::gpu_placement(comm());
  const int ok = p.nccl_ok ? 1 : 0;
  int min_ok = 0, max_ok = 0;
  MPI_Allreduce(&ok, &min_ok, 1, MPI_INT, MPI_MIN, comm());
  MPI_Allreduce(&ok, &max_ok, 1, MPI_INT, MPI_MAX, comm());
  EXPECT_EQ(min_ok, max_ok) << "ranks disagree on whether NCCL can run";
  if (!p.nccl_ok) {
    EXPECT_FALSE(p.why_not.empty());
  }
  EXPECT_GE(p.local_rank, 0);
  EXPECT_LT(p.local_rank, p.local_size);
}

TEST(NcclComm, AllReduceMatchesMpi) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  dtl::NcclComm nccl(comm(), p.device);
  EXPECT_EQ(nccl.rank(), comm().rank());
  EXPECT_EQ(nccl.size(), comm().size());
  const std::size_t n = 100003;
  std::vector<float> host(n), expected(n), got(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i + 7 * comm().rank()) % 31);
  MPI_Allreduce(host.data(), expected.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm());
  dtl::cuda::DeviceBuffer buf(n * sizeof(float));
  dtl::cuda::Stream stream;
  auto* data = static_cast<float*>(buf.data());
  dtl::cuda::upload(data, std::span<const float>(host), stream.get());
  DTL_NCCL_CHECK(ncclAllReduce(buf.data(), buf.data(), n, ncclFloat32, ncclSum, nccl.get(), stream.get()));
  got = dtl::cuda::download(data, n, stream.get());
  EXPECT_TRUE(dtl::testing::buffers_equal(expected, got, "allreduce"));
}

TEST(NcclComm, MoveLeavesTheSourceEmpty) {
  const auto p = dtl::gpu_placement(comm());
  DTL_SKIP_IF_ANY(!p.nccl_ok, "NCCL cannot run here: " + p.why_not);
  dtl::NcclComm a(comm(), p.device);
  ncclComm_t handle = a.get();
  dtl::NcclComm b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(b.get(), handle);
  dtl::NcclComm c;
  c = std::move(b);
  EXPECT_EQ(c.get(), handle);
  EXPECT_EQ(c.device(), p.device);
}

}  // namespace
