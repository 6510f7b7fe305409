// Lab 03, task F: the ring loop over P virtual ranks, shared by the GPU ring
// (virtual_ring.cu, which launches kernels) and its host mirror
// (reduce_copy_host.cc, which runs the kernel's threads on the CPU).
//
// What this file teaches: on one GPU a "rank" is just a buffer. The ring is 2(P-1)
// steps; at each step every virtual rank has one job (ring_job()), the P jobs of a
// step are independent (they touch disjoint chunks) and go to the GPU together,
// and step s+1 starts only after step s has finished — which one stream gives for
// free, because kernels on one stream run in order. No host synchronization.
//
// The loop is written once, with the launch as a parameter (`launch_step`: takes
// the step's jobs, a std::span<const ReduceCopyArgs<T>>), so the CPU tests
// exercise the very loop the GPU runs.
#pragma once

#include <span>
#include <vector>

#include "harness/error.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03::detail {

// bufs: P buffers of (count,) elements, one per virtual rank. In: contributions.
// Out: the sum in every one.
template <typename T, typename LaunchStep>
void run_virtual_ring(const char* function, std::span<T* const> bufs, std::size_t count, bool fuse,
                      LaunchStep&& launch_step) {
  DTL_REQUIRE_ARG(!bufs.empty(), function, "bufs", "is empty; a ring needs at least one buffer");
  for (T* buf : bufs) {
    DTL_REQUIRE_ARG(buf != nullptr || count == 0, function, "bufs", "holds a null buffer");
  }
  const int world_size = static_cast<int>(bufs.size());
  if (world_size == 1 || count == 0) return;  // nothing to add up: no steps
  std::vector<ReduceCopyArgs<T>> jobs;
  jobs.reserve(bufs.size());
  // TODO(student): Run the whole ring allreduce over the P virtual ranks' buffers: one launch_step() per
  //   step that is not skipped, with every virtual rank's job of that step (ring_job(),
  //   ring_job_args() with its own, its left and its right neighbour's buffer); no job for an
  //   empty chunk or a skipped step. On return every buffer holds the sum (handout part 2,
  //   F).
  throw dtl::NotImplemented("virtual_ring_allreduce");
}

}  // namespace dtl::lab03::detail
