// The NCCL backend: collectives on a side stream, ordered after the compute
// stream by an event, completed by an event. See Note [Why a side stream] in
// the header.
#include "harness/comm/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <iostream>
#include <thread>
#include <utility>

#include "harness/comm/nccl_check.h"
#include "harness/cuda/check.h"

namespace dtl {

namespace detail {

// What the communicator shares with its Works. `alive` turns false when the
// communicator is destroyed: a Work that outlives it (against the contract)
// must not ask a destroyed NCCL communicator for its errors.
struct NcclState {
  ncclComm_t comm = nullptr;
  std::atomic<bool> failed{false};
  std::atomic<bool> alive{true};
};

}  // namespace detail

namespace {

// How often wait() looks at the end event: short enough that the end time is
// close, long enough that a waiting rank leaves the CPU to others.
constexpr auto kPollInterval = std::chrono::microseconds(20);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kF16: return ncclFloat16;    // ncclHalf
    case DType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;  // not reached: the switch names every DType
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Frees a scratch copy of an input, stream-ordered: after the collective that reads it.
struct FreeAsyncLater {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  ~FreeAsyncLater() {
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
  }
};

// Throws (and marks the communicator failed) if NCCL reports that an operation
// in flight has failed, e.g. a peer process died or the network broke. Without
// this a wait() on such an operation would only ever end in a TimeoutError.
void check_async_error(detail::NcclState& state) {
  if (!state.alive.load()) return;
  ncclResult_t async = ncclSuccess;
  DTL_NCCL_CHECK(ncclCommGetAsyncError(state.comm, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    state.failed.store(true);
    detail::throw_nccl_error(static_cast<int>(async), ncclGetErrorString(async),
                             "ncclCommGetAsyncError (the collective failed while in flight)", __FILE__, __LINE__);
  }
}

// One collective: `ready` on the compute stream, `done` on the side stream.
// Complete when the host sees `done` complete.
class EventWork final : public WorkImpl {
 public:
  EventWork(std::string description, double issue_seconds, cuda::Event ready, cuda::Event done,
            cudaStream_t compute, std::shared_ptr<detail::NcclState> state)
      : WorkImpl(std::move(description), issue_seconds),
        ready_(std::move(ready)),
        done_(std::move(done)),
        compute_(compute),
        state_(std::move(state)) {}

  bool test() override {
    if (complete_) return true;
    const cudaError_t rc = cudaEventQuery(done_.get());
    if (rc == cudaErrorNotReady) {
      check_async_error(*state_);
      return false;
    }
    if (rc != cudaSuccess) state_->failed.store(true);
    DTL_CUDA_CHECK(rc);
    finish();
    return true;
  }

  bool wait_until(double deadline_seconds) override {
    // cudaEventSynchronize has no deadline, and would not notice a failed
    // peer: poll, sleeping in between.
    while (!test()) {
      if (clock_seconds() >= deadline_seconds) return false;
      std::this_thread::sleep_for(kPollInterval);
    }
    return true;
  }

 private:
  void finish() {
    complete_ = true;
    const double end = clock_seconds();
    // The GPU's own time from `ready` to `done`, placed before the host's
    // sighting of `done`: see "Times of a Work" in the header.
    float ms = 0.0F;
    if (cudaEventElapsedTime(&ms, ready_.get(), done_.get()) == cudaSuccess) {
      set_start(std::max(issue_seconds(), end - static_cast<double>(ms) * 1e-3));
    }
    set_end(end);
    // Work queued on the compute stream from now on runs after the collective.
    // The host has seen `done` complete, so this adds no delay; it states the
    // dependency where the stream can see it (see Note [Why a side stream]).
    DTL_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_.get(), 0));
  }

  cuda::Event ready_;
  cuda::Event done_;
  cudaStream_t compute_;
  std::shared_ptr<detail::NcclState> state_;
  bool complete_ = false;
};

// Checked on every rank before anything is created, so that every rank throws
// together (gpu_placement agrees on nccl_ok and on the reason).
GpuPlacement checked_placement(MPI_Comm parent) {
  GpuPlacement placement = gpu_placement(parent);
  if (!placement.nccl_ok) {
    throw Error("NcclCommunicator: NCCL cannot run here: " + placement.why_not +
                ". Run one rank per GPU (or use an MPI backend for host buffers).");
  }
  return placement;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm parent, cudaStream_t compute_stream)
    : placement_(checked_placement(parent)),
      nccl_(parent, placement_.device),
      side_(),
      compute_(compute_stream),
      state_(std::make_shared<detail::NcclState>()) {
  state_->comm = nccl_.get();
  DTL_NCCL_CHECK(ncclGetVersion(&nccl_version_));
}

NcclCommunicator::~NcclCommunicator() {
  // Drain the side stream before the NCCL communicator goes: every rank issued
  // what is queued there, so it completes. If it does not (a peer that skipped
  // an operation, or died), abort rather than hang in ncclCommDestroy.
  cudaSetDevice(device());
  const double deadline = clock_seconds() + (timeout() > 0 ? timeout() : 1e300);
  while (!state_->failed.load()) {
    const cudaError_t rc = cudaStreamQuery(side_.get());
    if (rc == cudaSuccess) break;
    ncclResult_t async = ncclSuccess;
    if (rc != cudaErrorNotReady || ncclCommGetAsyncError(nccl_.get(), &async) != ncclSuccess ||
        (async != ncclSuccess && async != ncclInProgress)) {
      state_->failed.store(true);
      break;
    }
    if (clock_seconds() >= deadline) {
      std::cerr << "[dtl] ~NcclCommunicator: collectives still in flight after " << timeout() << " s ["
                << where_am_i() << "]; aborting the NCCL communicator" << std::endl;
      state_->failed.store(true);
      break;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  state_->alive.store(false);
  if (state_->failed.load()) nccl_.mark_failed();
  // Members go in reverse order: the side stream, then the NCCL communicator.
}

template <typename Issue>
std::unique_ptr<WorkImpl> NcclCommunicator::launch(const OpInfo& info, Issue&& issue) {
  try {
    // The device is per host thread; the issuing thread may have another current.
    DTL_CUDA_CHECK(cudaSetDevice(device()));
    cuda::Event ready;
    cuda::Event done;
    const double issued = clock_seconds();
    ready.record(compute_);  // after the kernels that wrote the input
    DTL_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), ready.get(), 0));
    // The count is the same on every rank, so an empty operation is skipped on
    // every rank alike; its events still order it like any other.
    if (info.count > 0) issue(side_.get());
    done.record(side_.get());
    return std::make_unique<EventWork>(info.description, issued, std::move(ready), std::move(done), compute_,
                                       state_);
  } catch (const NcclError&) {
    state_->failed.store(true);
    rethrow_with_context(std::current_exception(), info.description);
  } catch (...) {
    rethrow_with_context(std::current_exception(), info.description);
  }
}

// Returns the input to read: `send_buf`, or (when it overlaps `recv_buf` in a
// way other than NCCL's in-place layout) a copy made on the side stream, which
// the caller frees with cudaFreeAsync after the collective (FreeAsyncLater).
// Stream-ordered, so the copy is taken after `ready`, and freed only once the
// collective has read it.
const void* NcclCommunicator::input_copy_if_overlapping(const void* send_buf, std::size_t send_bytes,
                                                        const void* recv_buf, std::size_t recv_bytes,
                                                        void** scratch) {
  *scratch = nullptr;
  if (!overlap(send_buf, send_bytes, recv_buf, recv_bytes)) return send_buf;
  DTL_CUDA_CHECK(cudaMallocAsync(scratch, send_bytes, side_.get()));
  DTL_CUDA_CHECK(cudaMemcpyAsync(*scratch, send_buf, send_bytes, cudaMemcpyDeviceToDevice, side_.get()));
  return *scratch;
}

// do_allreduce: ncclAllReduce in place (ncclSum, or ncclAvg for kAvg) on the side stream.
std::unique_ptr<WorkImpl> NcclCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  ncclComm_t comm = nccl_.get();
  return launch(info, [&](cudaStream_t side) {
    DTL_NCCL_CHECK(
        ncclAllReduce(buf, buf, info.count, nccl_type(info.dtype), nccl_op(info.op), comm, side));
  });
}

// do_broadcast: ncclBroadcast in place on the side stream.
std::unique_ptr<WorkImpl> NcclCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  ncclComm_t comm = nccl_.get();
  return launch(info, [&](cudaStream_t side) {
    DTL_NCCL_CHECK(ncclBroadcast(buf, buf, info.count, nccl_type(info.dtype), info.root, comm, side));
  });
}

// do_reduce_scatter: ncclReduceScatter on the side stream (in place in NCCL's layout).
std::unique_ptr<WorkImpl> NcclCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                              const OpInfo& info) {
  ncclComm_t comm = nccl_.get();
  const std::size_t block_bytes = info.count * dtype_size(info.dtype);
  const auto* own_block = static_cast<const std::byte*>(send_buf) + block_bytes * static_cast<std::size_t>(rank());
  const bool in_place = recv_buf == own_block;  // NCCL's layout: no copy needed
  // See Note [NCCL 2.28's one-rank average] in the header.
  const bool one_rank_average = world_size() == 1 && info.op == ReduceOp::kAvg && nccl_version_ < 23000;
  return launch(info, [&](cudaStream_t side) {
    FreeAsyncLater scratch{nullptr, side};
    const void* input = in_place ? send_buf
                                 : input_copy_if_overlapping(send_buf, info.total_bytes(), recv_buf, block_bytes,
                                                             &scratch.ptr);
    if (one_rank_average) {
      if (input != recv_buf) {
        DTL_CUDA_CHECK(cudaMemcpyAsync(recv_buf, input, block_bytes, cudaMemcpyDeviceToDevice, side));
      }
      return;
    }
    DTL_NCCL_CHECK(
        ncclReduceScatter(input, recv_buf, info.count, nccl_type(info.dtype), nccl_op(info.op), comm, side));
  });
}

// do_allgather: ncclAllGather on the side stream (in place in NCCL's layout).
std::unique_ptr<WorkImpl> NcclCommunicator::do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) {
  ncclComm_t comm = nccl_.get();
  const std::size_t block_bytes = info.count * dtype_size(info.dtype);
  const auto* own_block = static_cast<const std::byte*>(recv_buf) + block_bytes * static_cast<std::size_t>(rank());
  const bool in_place = send_buf == own_block;  // NCCL's layout: no copy needed
  return launch(info, [&](cudaStream_t side) {
    FreeAsyncLater scratch{nullptr, side};
    const void* input = in_place ? send_buf
                                 : input_copy_if_overlapping(send_buf, block_bytes, recv_buf, info.total_bytes(),
                                                             &scratch.ptr);
    DTL_NCCL_CHECK(ncclAllGather(input, recv_buf, info.count, nccl_type(info.dtype), comm, side));
  });
}

}  // namespace dtl
