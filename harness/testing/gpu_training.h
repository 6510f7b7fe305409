/// @file
/// @brief GpuTraining: what a training lab needs to run its src/ on the GPU over NCCL,
/// made in one order on every rank (labs 04 and 06: tests and benchmark rows).
///
/// Only in builds with NCCL (DTL_HAVE_NCCL, linking dtl::cuda). In order:
///   1. the rank's device made current (gpu_placement()'s choice, passed in);
///   2. a non-blocking compute stream on it, made nn's compute stream for the
///      object's lifetime (Note [The compute stream] in harness/nn/compute_stream.h);
///   3. the backend: a HostDeviceCommunicator, Open MPI for host buffers (a
///      model check, a loss flag) and an NcclCommunicator told the compute stream
///      for device buffers (Note [Host and device buffers], Note [Why a side stream]).
/// Destroyed in reverse: the backend (draining NCCL's side stream), then the scope,
/// then the stream. Objects on the device (models) must go before it.
#pragma once

#if DTL_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "harness/comm/host_device_communicator.h"
#include "harness/comm/nccl_comm.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/comm/nccl_communicator.h"
#include "harness/cuda/check.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/error.h"
#include "harness/nn/compute_stream.h"

namespace dtl::testing {

/// @brief The device, the compute stream and the cpu:mpi-thread,cuda:nccl backend.
class GpuTraining {
 public:
  /// @brief Sets `device`, makes the stream and the backend. Collective over `parent`.
  /// @param[in] parent the ranks.
  /// @param[in] device this rank's GPU (GpuPlacement::device).
  /// @throws CudaError, NcclError or MpiError if any of them cannot be made.
  GpuTraining(MPI_Comm parent, int device) : device_set_(set_device(device)), scope_(compute_.get()) {
    auto host = std::make_unique<MpiCommunicator>(parent, MpiMode::kThread);
    auto nccl = std::make_unique<NcclCommunicator>(parent, compute_.get());
    backend_ = std::make_unique<HostDeviceCommunicator>(std::move(host), std::move(nccl), cuda::is_device_pointer);
  }
  /// @brief Waits for the compute stream first: device memory freed after this object
  /// (a model that outlives it) goes back on the legacy default stream, which does not
  /// wait for this non-blocking stream (Note [Stream-ordered device memory] in
  /// harness/nn/tensor.cc). The compute stream never waits for anything unfinished.
  ~GpuTraining() { cudaStreamSynchronize(compute_.get()); }  // errors ignored: a destructor
  GpuTraining(const GpuTraining&) = delete;
  GpuTraining& operator=(const GpuTraining&) = delete;

  /// @return the backend (host buffers: Open MPI; device buffers: NCCL).
  HostDeviceCommunicator& backend() noexcept { return *backend_; }
  /// @return the compute stream (also nn::compute_stream() on the constructing thread).
  cudaStream_t compute_stream() const noexcept { return compute_.get(); }

 private:
  static bool set_device(int device) {
    DTL_CUDA_CHECK(cudaSetDevice(device));
    return true;
  }
  bool device_set_;              // first: the stream below is made on this device
  cuda::Stream compute_;
  nn::ComputeStreamScope scope_;
  std::unique_ptr<HostDeviceCommunicator> backend_;
};

/// @brief Whether benchmark rows `rows` can run on the GPU over NCCL here, agreed by
/// every rank of `comm` (collective): this rank's device (gpu_placement()'s), or -1
/// after rank 0 printed "# GPU rows (rows): skipped — " and why (no GPU on some
/// rank, or NCCL cannot run these ranks).
/// @param[in] comm the ranks. @param[in] rows the rows' names, for the message.
/// @return the device, or -1.
inline int gpu_rows_device(MPI_Comm comm, const std::string& rows) {
  int rank = 0;
  DTL_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const auto skip = [&](const std::string& why) {
    if (rank == 0) std::printf("# GPU rows (%s): skipped — %s\n", rows.c_str(), why.c_str());
    return -1;
  };
  std::string why;
  int ok = cuda::gpu_count(&why) > 0 ? 1 : 0;
  int ok_all = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, comm));
  if (!ok_all) return skip(ok ? std::string("another rank has no GPU") : why);
  const GpuPlacement placement = gpu_placement(comm);  // the same answer on every rank
  if (!placement.nccl_ok) return skip("NCCL cannot run these ranks: " + placement.why_not);
  return placement.device;
}

}  // namespace dtl::testing

#endif  // DTL_HAVE_NCCL
