// HostDeviceCommunicator's routing, on the CPU: two Open MPI backends stand for
// "host" and "device", and a classifier calls the buffers of one vector "device".
// Each operation must reach the backend of its buffers (seen by a
// RecordingCommunicator on each), with the right result; mixed buffers are refused
// on every rank alike, before anything is issued.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "harness/comm/host_device_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/recording_communicator.h"

namespace {

using dtl::testing::comm;
using dtl::testing::RecordingCommunicator;

TEST(HostDeviceCommunicator, RoutesEachOperationByItsBuffers) {
  const int size = comm().size();
  dtl::MpiCommunicator host_mpi(comm(), dtl::MpiMode::kThread), device_mpi(comm(), dtl::MpiMode::kThread);
  auto host = std::make_unique<RecordingCommunicator>(host_mpi);
  auto device = std::make_unique<RecordingCommunicator>(device_mpi);
  RecordingCommunicator* host_seen = host.get();
  RecordingCommunicator* device_seen = device.get();
  std::vector<float> on_device(4 * static_cast<std::size_t>(size), 1.0f);
  std::vector<float> on_host(4, 2.0f);
  const auto in_device = [&](const void* p) {
    const auto* f = static_cast<const float*>(p);
    return f >= on_device.data() && f < on_device.data() + on_device.size();
  };
  dtl::HostDeviceCommunicator routed(std::move(host), std::move(device), in_device);
  EXPECT_EQ(routed.name(), "cpu:recording mpi-thread,cuda:recording mpi-thread");

  routed.allreduce(std::span<float>(on_device.data(), 4), dtl::ReduceOp::kSum).wait();
  routed.allreduce(std::span<float>(on_host), dtl::ReduceOp::kAvg).wait();
  routed.allgather(std::span<const float>(on_device.data(), 4), std::span<float>(on_device)).wait();
  EXPECT_EQ(device_seen->count(dtl::CollectiveKind::kAllreduce), 1);
  EXPECT_EQ(device_seen->count(dtl::CollectiveKind::kAllgather), 1);
  EXPECT_EQ(host_seen->count(dtl::CollectiveKind::kAllreduce), 1);
  EXPECT_EQ(host_seen->count(dtl::CollectiveKind::kAllgather), 0);
  EXPECT_EQ(on_host[0], 2.0f);                           // the average of 2s
  EXPECT_EQ(on_device[0], static_cast<float>(size));     // the sum of 1s, gathered

  // One buffer on each side: refused at the call, on every rank.
  std::vector<float> gathered(4 * static_cast<std::size_t>(size));
  EXPECT_THROW(routed.allgather(std::span<const float>(on_device.data(), 4), std::span<float>(gathered)),
               dtl::InvalidArgument);
}

}  // namespace
