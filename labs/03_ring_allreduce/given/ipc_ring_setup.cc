// Lab 03, task G, given: setting up the IPC ring — each process exports its
// buffer as a CUDA IPC handle, the handles travel over MPI, and each process maps
// its two neighbours' buffers; and tearing it down in the only safe order. The
// ring loop itself, IpcRing::allreduce(), is the task (src/ipc_ring.cc, which
// explains CUDA IPC).
//
// Every step that can fail on one rank alone is followed by an agreement (an
// MPI_Allreduce of an "ok" flag), so that all ranks throw together instead of
// some of them waiting forever in the next collective.
#if DTL_LAB_HAS_CUDA
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "harness/comm/mpi.h"
#include "harness/cuda/check.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {
namespace {

// Opens a peer's handle; returns the peer's buffer as seen from this process.
template <typename T>
T* open_peer(const cudaIpcMemHandle_t& handle) {
  void* peer = nullptr;
  DTL_CUDA_CHECK(cudaIpcOpenMemHandle(&peer, handle, cudaIpcMemLazyEnablePeerAccess));
  return static_cast<T*>(peer);
}

}  // namespace

template <GpuElement T>
IpcRing<T>::IpcRing(MPI_Comm comm, std::size_t count, int device) : comm_(comm), count_(count) {
  rank_ = comm_.rank();
  world_size_ = comm_.size();
  device_ = device;
  // Everything that can fail on one rank alone happens inside `try`; then the
  // ranks agree, so that they all throw together instead of some of them
  // waiting forever in the next collective.
  std::vector<cudaIpcMemHandle_t> handles(static_cast<std::size_t>(world_size_));
  std::string failure;
  try {
    DTL_CUDA_CHECK(cudaSetDevice(device));
    stream_.emplace();
    buf_ = cuda::DeviceBuffer(count * sizeof(T));
    if (world_size_ > 1 && count > 0) {
      DTL_CUDA_CHECK(cudaIpcGetMemHandle(&handles[static_cast<std::size_t>(rank_)], buf_.data()));
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  int ok_here = failure.empty() ? 1 : 0, ok_everywhere = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok_here, &ok_everywhere, 1, MPI_INT, MPI_MIN, comm_));
  if (!ok_everywhere) {
    throw Error(failure.empty() ? "IpcRing: another rank failed to set up its buffer" : failure);
  }
  if (world_size_ == 1 || count == 0) return;  // no peers to map

  // The handles travel as bytes: each rank's 64-byte token to every rank.
  DTL_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, handles.data(), sizeof(cudaIpcMemHandle_t),
                              MPI_BYTE, comm_));
  const int left = (rank_ + world_size_ - 1) % world_size_;
  const int right = (rank_ + 1) % world_size_;
  try {
    left_ = open_peer<T>(handles[static_cast<std::size_t>(left)]);
    // With P = 2 both neighbours are the same process: one mapping serves both
    // (opening it again would only add a reference to close).
    right_ = right == left ? left_ : open_peer<T>(handles[static_cast<std::size_t>(right)]);
  } catch (const Error& e) {
    failure = e.what();
    // The destructor will not run: close what was opened.
    if (left_ != nullptr) cudaIpcCloseMemHandle(left_);
    left_ = right_ = nullptr;
  }
  ok_here = failure.empty() ? 1 : 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok_here, &ok_everywhere, 1, MPI_INT, MPI_MIN, comm_));
  if (!ok_everywhere) {
    throw Error(failure.empty() ? "IpcRing: another rank failed to open its neighbours' buffers" : failure);
  }
}

template <GpuElement T>
IpcRing<T>::~IpcRing() {
  // Errors are ignored: destructors never throw. Close our mappings of the
  // neighbours' buffers; then wait until every rank has closed its mappings of
  // ours, and only then free it (buf_'s destructor, after this body): freeing
  // exported memory that a peer still has mapped is undefined behaviour.
  if (left_ == nullptr) return;  // nothing was mapped (one rank, count 0, or a failed constructor)
  if (right_ != left_) cudaIpcCloseMemHandle(right_);
  cudaIpcCloseMemHandle(left_);
  MPI_Barrier(comm_);
}

template class IpcRing<float>;
template class IpcRing<__half>;
template class IpcRing<__nv_bfloat16>;

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
