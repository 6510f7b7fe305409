// Lab 03, task E: one rank's job at one step of the GPU ring (pull model).
//
// What this file teaches: the GPU rings need no new schedule. ring_step() already
// says which chunk each rank receives at each step; on a GPU "receiving" becomes
// a reduce-copy that reads the chunk from the left neighbour's buffer (in the same
// process, or mapped through CUDA IPC) and writes it into this rank's buffer:
//
//   reduce-scatter step:  mine[c] = mine[c] + left[c]
//   allgather step:       mine[c] = left[c]
//
// and one optimization: the fused step. At the last reduce-scatter step (P-2)
// rank r completes chunk r; the first allgather step (P-1) would have its right
// neighbour copy exactly that chunk. Writing it into right[r] at once, from the
// registers that already hold it, saves one read of the chunk and one step.
//
// Why all ranks of one step may run at once (the in-place hazard), and why the
// steps may not: see ring_job() in lab03/ring_cuda.h.
#if DTL_LAB_HAS_CUDA
#include "harness/error.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {

RingJob ring_job(int rank, int world_size, int step, std::size_t count, bool fuse) {
  // TODO(student): Return what virtual rank `rank` does at `step` on one GPU (handout part 2, E): the
  //   chunk it pulls from its left neighbour (begin, count of that chunk), whether it adds or
  //   copies, and with `fuse` the fused form of the last reduce-scatter step (to_right) and
  //   the allgather step it makes redundant (skip). Same schedule as ring_step(); one step's
  //   jobs touch disjoint elements.
  throw dtl::NotImplemented("ring_job");
}

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
