/// @file
/// @brief The NCCL backend of dtl::Communicator: collectives on device buffers,
/// issued on a side stream that is ordered after the caller's compute stream by a
/// pair of CUDA events. See Note [Why a side stream].
///
/// Built into dtl::cuda only where NCCL is found (DTL_HAVE_NCCL). Every buffer
/// handed to it is device memory on this rank's GPU (gpu_placement()'s device).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/comm/nccl_comm.h"
#include "harness/cuda/stream.h"

namespace dtl {

namespace detail {
struct NcclState;  // what an NcclCommunicator shares with its Works
}  // namespace detail

// Note [Why a side stream]
// ------------------------
// DDP wants a bucket's allreduce to run *while* backward computes the next
// bucket's gradients. On a GPU both are kernels, and kernels on one stream run
// one after another: an ncclAllReduce issued on the compute stream would wait
// for every backward kernel queued before it, and every later backward kernel
// would wait for it. No overlap.
//
// So the collectives go on a stream of their own (the side stream, created
// non-blocking so that it does not synchronize with the legacy default stream
// either), and two events carry the dependencies that the one stream gave for
// free:
//
//   compute: ... grad kernels ... [ready] ... more backward kernels ...  wait(done) ...
//                                    |                                       ^
//   side:                      wait(ready) -> ncclAllReduce -> [done] -------+
//
//  - `ready` is recorded on the compute stream when the operation is issued, and
//    the side stream waits for it: the collective reads the gradients only
//    after the kernels that wrote them (everything queued before the issue).
//  - `done` is recorded on the side stream after the collective. Work::wait()
//    returns once the host has seen `done` complete, and then makes the compute
//    stream wait for `done` as well: kernels queued later (the optimizer step)
//    read the reduced gradients, never the half-reduced ones.
//
// Neither event blocks the host or the compute stream at issue time, so the
// backward kernels queued after the issue run while NCCL's kernels move data.
// On one GPU the two streams share the SMs: NCCL's kernels take a few SMs, the
// rest keep computing (this is what PyTorch's ProcessGroupNCCL does too).

// Note [NCCL 2.28's one-rank average]
// With one rank NCCL does not run its ring: it launches a small "one-rank
// reduce" kernel that applies the reduction's scaling (PreMulSum for a
// floating-point average, SumPostDiv for an integer one) while it copies.
// NCCL 2.28.9 (PyTorch's wheel on the GPU host, 2026-11-27) leaves the last
// element of an out-of-place ncclReduceScatter with ncclAvg unwritten for some
// counts: f64 at 4099 and 65537 elements (1, 7 and 4101 were right, and so were
// ncclSum and in-place calls, where the unwritten element already holds the
// answer). A bare NCCL program shows it, and NCCL 2.30.7 is right on the same
// program. The average of one rank is its input, so below NCCL 2.30 this
// backend answers a one-rank kAvg reduce-scatter with a device-to-device copy
// on the side stream: what NCCL itself issues for ncclSum at one rank, so it
// costs nothing extra. harness_nccl_communicator_test_np1 covers it.

/// @brief dtl::Communicator over NCCL, for device buffers: one rank per GPU.
///
/// Construction is collective over the MPI communicator: gpu_placement() picks
/// this rank's device and checks, the same on every rank, that NCCL can run
/// here; NcclComm creates the NCCL communicator; the device becomes current.
///
/// Element types: kF32, kF64, kI32, kF16 (ncclHalf) and kBF16 (ncclBfloat16),
/// for every collective. ReduceOp::kSum is ncclSum; ReduceOp::kAvg is ncclAvg,
/// which for integers sums and divides once at the end (truncating, as the
/// contract says), but for floating point types multiplies each rank's
/// contribution by 1/P *before* summing (NCCL's PreMulSum). That is the same
/// bits as sum-then-divide when P is a power of two, and can differ in the last
/// bit otherwise.
///
/// Buffers follow the contract in communicator.h, which uses NCCL's layouts:
/// reduce_scatter is in place when recv_buf == send_buf + rank() x recv_count,
/// allgather when send_buf == recv_buf + rank() x send_count. Any other overlap
/// of input and output is made safe by a stream-ordered copy of the input
/// (cudaMallocAsync on the side stream), as the MPI backend copies on the host.
///
/// Times of a Work (see Note [Why a side stream]): they come from host clock
/// samples, since the GPU's event clock is not clock_seconds(). The end time is
/// when the host first saw `done` complete (in Work::test() or in wait(), which
/// polls every 20 us), so it is late by up to the polling interval, or by however
/// long the caller went without asking. The start time is that end minus the
/// GPU time between `ready` and `done` (cudaEventElapsedTime), and never before
/// the issue: the moment the compute stream reached the issue point, which
/// includes any wait for a slower peer, as for the other backends.
class NcclCommunicator final : public Communicator {
 public:
  /// @brief Creates the NCCL communicator over `parent`'s ranks (collective over `parent`).
  ///
  /// Every rank of `parent` must call this, in the same order as its other
  /// collectives on `parent`.
  /// @param[in] parent the MPI communicator whose ranks (and order) the NCCL communicator takes.
  /// @param[in] compute_stream the stream the caller computes on: collectives start after the work
  ///            queued on it before each issue, and work queued on it after a Work::wait() sees the
  ///            result. Default: the legacy default stream (cudaStreamLegacy). Not owned; it must
  ///            outlive this object and belong to this rank's device.
  /// @throws Error on every rank, with gpu_placement()'s reason, when NCCL cannot run here
  ///         (no GPU, or fewer GPUs than ranks on a host and an NCCL that refuses to share one).
  /// @throws MpiError, CudaError or NcclError if creating the communicator or the side stream fails.
  explicit NcclCommunicator(MPI_Comm parent, cudaStream_t compute_stream = cudaStreamLegacy);
  /// @brief Waits (up to timeout()) for what is still queued on the side stream, then destroys
  /// the NCCL communicator, or aborts it if an operation failed or did not finish; never throws.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// @return this process's rank (the same as in `parent`).
  int rank() const override { return nccl_.rank(); }
  /// @return the number of ranks.
  int world_size() const override { return nccl_.size(); }
  /// @return "nccl".
  std::string name() const override { return "nccl"; }

  /// @return the CUDA device this rank's buffers must live on.
  int device() const noexcept { return nccl_.device(); }
  /// @return the caller's compute stream (not owned).
  cudaStream_t compute_stream() const noexcept { return compute_; }
  /// @return the side stream the collectives run on (owned by this object).
  cudaStream_t side_stream() const noexcept { return side_.get(); }
  /// @return the NCCL communicator (still owned by this object).
  ncclComm_t get() const noexcept { return nccl_.get(); }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  template <typename Issue>
  std::unique_ptr<WorkImpl> launch(const OpInfo& info, Issue&& issue);
  const void* input_copy_if_overlapping(const void* send_buf, std::size_t send_bytes, const void* recv_buf,
                                        std::size_t recv_bytes, void** scratch);

  GpuPlacement placement_;  // first: NcclComm needs its device
  int nccl_version_ = 0;    // ncclGetVersion(): e.g. 22809 for 2.28.9
  NcclComm nccl_;           // sets the device, so the stream below is created on it
  cuda::Stream side_;
  cudaStream_t compute_;
  // Shared with every Work: the NCCL handle, whether an operation failed (then
  // the destructor aborts instead of waiting), whether the handle is still alive.
  std::shared_ptr<detail::NcclState> state_;
};

}  // namespace dtl
