// Lab 03, task G: the ring across processes, each reading its neighbour's GPU
// memory directly through CUDA IPC.
//
// What this file teaches: how two processes share GPU memory without copying it
// through the host. The owner calls cudaIpcGetMemHandle on its cudaMalloc'd
// buffer: a 64-byte token. Any transport can carry the token (MPI_Allgather
// here); the peer calls cudaIpcOpenMemHandle on it and gets a device pointer, in
// its own address space, to the owner's memory. A kernel in the peer then reads
// (or writes) that memory as if it were its own: on one GPU it is its own; across
// GPUs the loads go over NVLink or PCIe (cudaIpcMemLazyEnablePeerAccess turns on
// peer access). This is how NCCL's P2P transport moves data inside a node.
//
//   rank r's buffer  <-- mapped by r-1 (its right neighbour's view) and r+1 (left)
//
// The ring itself is ring_job(): at each step rank r pulls chunk c from its left
// neighbour's buffer into its own. What is new is synchronization: the ranks are
// separate processes with separate streams, so nothing orders one rank's kernel
// after another's. Each step ends with "my kernel has finished"
// (cudaStreamSynchronize) and "everyone's has" (MPI_Barrier). See
// IpcRing::allreduce() in lab03/ring_cuda.h for the hazards this prevents.
//
// Left out: IPC events (cudaIpcGetEventHandle) to let one GPU wait on another
// without a host round trip per step, and pipelining a step in slices (as NCCL
// does) so that the barrier's latency hides behind data movement.
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

template <GpuElement T>
void IpcRing<T>::allreduce(bool fuse) {
  if (world_size_ == 1 || count_ == 0) return;
  DTL_CUDA_CHECK(cudaSetDevice(device_));
  // BEGIN SOLUTION(IpcRing::allreduce)
  // | For each of the 2(P-1) steps: ring_job(rank_, world_size_, step, count_, fuse); a
  // | skipped step is skipped by every rank (it depends on the step only). Otherwise launch
  // | reduce_copy(ring_job_args(job, data(), left_, right_), stream()) (an empty chunk
  // | launches nothing), wait for your kernel (cudaStreamSynchronize), and then for
  // | everyone's before the next step: an MPI_Allreduce(MIN) of an "ok" flag on comm_ is
  // | that barrier and also tells every rank when one rank's CUDA call failed (catch
  // | dtl::Error around launch + sync), so that all throw together instead of one
  // | throwing and the others waiting for it forever.
  for (int step = 0; step < 2 * (world_size_ - 1); ++step) {
    const RingJob job = ring_job(rank_, world_size_, step, count_, fuse);
    if (job.skip) continue;
    std::string failure;
    try {
      reduce_copy(ring_job_args(job, data(), left_, right_), stream());
      // My writes (and reads) of this step are done...
      DTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
    } catch (const Error& e) {
      failure = e.what();
    }
    // ...and so are everyone's (the next step reads what the neighbours wrote),
    // or every rank learns that one of them failed.
    int ok_here = failure.empty() ? 1 : 0, ok_everywhere = 0;
    DTL_MPI_CHECK(MPI_Allreduce(&ok_here, &ok_everywhere, 1, MPI_INT, MPI_MIN, comm_));
    if (!ok_everywhere) {
      throw Error(failure.empty() ? "IpcRing::allreduce: another rank failed at step " + std::to_string(step)
                                  : failure);
    }
  }
  // END SOLUTION
}

template class IpcRing<float>;
template class IpcRing<__half>;
template class IpcRing<__nv_bfloat16>;

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
