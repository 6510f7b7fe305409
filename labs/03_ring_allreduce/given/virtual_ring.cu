// Lab 03, task F: the virtual ring on one GPU — the loop of virtual_ring.h with
// one kernel launch (reduce_copy_batch) per step.
//
// One stream, no synchronization inside: kernels on a stream run in launch order,
// so step s+1 reads what step s wrote. The caller synchronizes (or records an
// event) when it wants the result on the host.
#include "lab03/ring_cuda.h"
#include "virtual_ring.h"

namespace dtl::lab03 {

template <GpuElement T>
void virtual_ring_allreduce(std::span<T* const> bufs, std::size_t count, cudaStream_t stream, bool fuse) {
  detail::run_virtual_ring<T>("virtual_ring_allreduce", bufs, count, fuse,
                              [stream](std::span<const ReduceCopyArgs<T>> jobs) { reduce_copy_batch<T>(jobs, stream); });
}

template void virtual_ring_allreduce<float>(std::span<float* const>, std::size_t, cudaStream_t, bool);
template void virtual_ring_allreduce<__half>(std::span<__half* const>, std::size_t, cudaStream_t, bool);
template void virtual_ring_allreduce<__nv_bfloat16>(std::span<__nv_bfloat16* const>, std::size_t, cudaStream_t,
                                                    bool);

}  // namespace dtl::lab03
