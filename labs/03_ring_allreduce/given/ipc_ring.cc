// Lab 03, task G, given: the ring across processes on GPUs through CUDA IPC.
//
// How two processes share GPU memory without copying it through the host: the
// owner calls cudaIpcGetMemHandle on its cudaMalloc'd buffer and gets a 64-byte
// token. Any transport can carry the token (MPI_Allgather here); the peer calls
// cudaIpcOpenMemHandle on it and gets a device pointer, in its own address space,
// to the owner's memory. A kernel in the peer then reads (or writes) that memory
// as if it were its own: on one GPU it is its own; across GPUs the loads go over
// NVLink or PCIe (cudaIpcMemLazyEnablePeerAccess turns on peer access). This is
// how NCCL's P2P transport moves data inside a node.
//
//   rank r's buffer  <-- mapped by r-1 (its right neighbour's view) and r+1 (left)
//
// This file sets the ring up (export, exchange and map the handles), tears it
// down in the only safe order, and runs task G's loop (src/ipc_ring.h) with a
// CUDA stream: launch = the reduce-copy kernel, wait = cudaStreamSynchronize.
//
// Every step that can fail on one rank alone is followed by agree(), so that all
// ranks throw together instead of some of them waiting forever in the next
// collective.
#if DTL_LAB_HAS_CUDA
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/cuda/check.h"
#include "ipc_ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {
namespace {

// Task G's stream on a GPU: kernels queued on a CUDA stream, and a host wait.
template <GpuElement T>
struct CudaStreamOps {
  cudaStream_t stream;
  void launch(const ReduceCopyArgs<T>& args) { reduce_copy(args, stream); }
  void wait() { DTL_CUDA_CHECK(cudaStreamSynchronize(stream)); }
};

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
  agree(comm_, failure, "IpcRing: another rank failed to set up its buffer");
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
  agree(comm_, failure, "IpcRing: another rank failed to open its neighbours' buffers");
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

template <GpuElement T>
void IpcRing<T>::allreduce(bool fuse) {
  if (world_size_ == 1 || count_ == 0) return;
  DTL_CUDA_CHECK(cudaSetDevice(device_));
  CudaStreamOps<T> ops{stream()};
  detail::run_ipc_ring(comm_, rank_, world_size_, count_, fuse, data(), left_, right_, ops);
}

template class IpcRing<float>;
template class IpcRing<__half>;
template class IpcRing<__nv_bfloat16>;

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
