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

#include "harness/comm/mpi.h"
#include "harness/cuda/check.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {

// The constructor (export, exchange and map the handles) and the destructor are
// given: labs/03_ring_allreduce/given/ipc_ring_setup.cc.

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

template void IpcRing<float>::allreduce(bool);
template void IpcRing<__half>::allreduce(bool);
template void IpcRing<__nv_bfloat16>::allreduce(bool);

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
