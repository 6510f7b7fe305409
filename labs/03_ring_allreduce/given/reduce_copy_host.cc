// Lab 03, tasks D and F on the host: the kernel's per-thread work and the virtual
// ring, run on the CPU, for the CPU tests (and for reading: the same code the GPU
// runs, stepped through one thread at a time).
//
// Nothing here is yours to write: it only instantiates reduce_copy.cuh and
// virtual_ring.h for the host. If these tests fail, the bug is in those files.
#if DTL_LAB_HAS_CUDA
#include <span>

#include "harness/error.h"
#include "lab03/ring_cuda.h"
#include "reduce_copy.cuh"
#include "virtual_ring.h"

namespace dtl::lab03 {

template <GpuElement T>
void reduce_copy_host_thread(const ReduceCopyArgs<T>& args, std::size_t thread, std::size_t num_threads) {
  detail::reduce_copy_thread(args, thread, num_threads);
}

template <GpuElement T>
void virtual_ring_allreduce_host(std::span<T* const> bufs, std::size_t count, bool fuse, std::size_t host_threads) {
  DTL_REQUIRE_ARG(host_threads >= 1, "virtual_ring_allreduce_host", "host_threads", "is 0; simulate at least one");
  detail::run_virtual_ring<T>("virtual_ring_allreduce_host", bufs, count, fuse,
                              [host_threads](std::span<const ReduceCopyArgs<T>> jobs) {
                                // The GPU runs the step's jobs and threads at once; any
                                // order gives the same result, since they are independent.
                                for (const auto& job : jobs) {
                                  for (std::size_t t = 0; t < host_threads; ++t) {
                                    detail::reduce_copy_thread(job, t, host_threads);
                                  }
                                }
                              });
}

template void reduce_copy_host_thread<float>(const ReduceCopyArgs<float>&, std::size_t, std::size_t);
template void reduce_copy_host_thread<__half>(const ReduceCopyArgs<__half>&, std::size_t, std::size_t);
template void reduce_copy_host_thread<__nv_bfloat16>(const ReduceCopyArgs<__nv_bfloat16>&, std::size_t, std::size_t);
template void virtual_ring_allreduce_host<float>(std::span<float* const>, std::size_t, bool, std::size_t);
template void virtual_ring_allreduce_host<__half>(std::span<__half* const>, std::size_t, bool, std::size_t);
template void virtual_ring_allreduce_host<__nv_bfloat16>(std::span<__nv_bfloat16* const>, std::size_t, bool,
                                                         std::size_t);

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
