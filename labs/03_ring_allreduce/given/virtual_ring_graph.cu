// Lab 03, part 2: VirtualRingGraph, the virtual ring's launches captured once into
// a CUDA Graph and replayed with one launch (handout, Note [Fewer launches]).
//
// Stream capture records what is queued on a stream instead of running it. Here
// that is every kernel of virtual_ring_allreduce() (your loop), in order, with its
// arguments. cudaGraphLaunch() then hands the whole chain to the GPU at once:
// each kernel still waits for the one before it (the steps need that), but the
// host no longer pays one launch per step.
#include <cuda_runtime.h>

#include "harness/cuda/check.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {

template <GpuElement T>
VirtualRingGraph<T>::VirtualRingGraph(std::span<T* const> bufs, std::size_t count, cudaStream_t stream, bool fuse)
    : stream_(stream) {
  // Thread-local mode: only this thread's unsafe calls (a synchronize, a
  // pageable copy) break the capture, not another thread's work elsewhere.
  DTL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    virtual_ring_allreduce<T>(bufs, count, stream, fuse);
  } catch (...) {
    // Leave the stream usable; the error is the loop's. Ending a capture that a
    // failed launch invalidated reports an error of its own: clear it, so that the
    // next unrelated DTL_CUDA_CHECK_LAUNCH() does not throw it.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  DTL_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  std::size_t nodes = 0;
  cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (status == cudaSuccess && nodes > 0) status = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  DTL_CUDA_CHECK(status);
  // Upload now, so that the first run() is timed like every other (a graph's
  // first launch otherwise includes moving it to the device).
  if (exec_ != nullptr) DTL_CUDA_CHECK(cudaGraphUpload(exec_, stream));
  kernels_ = nodes;
}

template <GpuElement T>
VirtualRingGraph<T>::~VirtualRingGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

template <GpuElement T>
void VirtualRingGraph<T>::run() {
  if (exec_ == nullptr) return;  // one buffer or nothing to add: no kernels
  DTL_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

template class VirtualRingGraph<float>;
template class VirtualRingGraph<__half>;
template class VirtualRingGraph<__nv_bfloat16>;

}  // namespace dtl::lab03
