// Lab 03, task A: the ring schedule — which chunk goes where at every step.
//
// What this file teaches: the ring allreduce is a fixed table. With the buffer cut
// into P chunks, at every step every rank sends one chunk to its right neighbour
// and receives one from its left, and the table says which. What the table must
// guarantee is in lab03/ring.h (ring_step()); handout section (b) plays it for
// P = 4, and Task A's hints derive it. The chunk index is all that part 1 (MPI)
// and part 2 (CUDA kernels) need to agree on.
#include "harness/error.h"
#include "lab03/ring.h"

#include <string>

namespace dtl::lab03 {

RingStep ring_step(int rank, int world_size, int step) {
  DTL_REQUIRE_ARG(world_size >= 2, "ring_step", "world_size",
                  "is " + std::to_string(world_size) + "; a ring needs at least 2 ranks (1 rank has no steps)");
  DTL_REQUIRE_ARG(rank >= 0 && rank < world_size, "ring_step", "rank",
                  "is " + std::to_string(rank) + "; it must be in [0, " + std::to_string(world_size) + ")");
  DTL_REQUIRE_ARG(step >= 0 && step < 2 * (world_size - 1), "ring_step", "step",
                  "is " + std::to_string(step) + "; it must be in [0, 2(P-1)) = [0, " +
                      std::to_string(2 * (world_size - 1)) + ")");
  // BEGIN SOLUTION(ring_step)
  // | Return RingStep{send_chunk, recv_chunk, reduce} for (rank, P, step), chunks in [0, P).
  // | The table must satisfy the invariants in lab03/ring.h: what rank r sends is what rank
  // | r+1 receives; steps 0 .. P-2 reduce, and after them rank r holds chunk r complete;
  // | steps P-1 .. 2P-3 copy and spread every complete chunk to every rank, each rank's
  // | contribution counted exactly once (handout Task A, section (b)). The argument checks
  // | are written above.
  // P = 4, chunk c of rank r written r.c; "+=" marks a reduce step, "=" a copy step:
  //
  //   reduce-scatter  step 0: r sends chunk r-1, receives chunk r-2 and adds it
  //                   step 1: r sends chunk r-2 (just added to), receives r-3
  //                   step 2: r sends chunk r-3, receives r-4 = r: now complete
  //   allgather       step 3: r sends its complete chunk r, receives r-1 (copy)
  //                   step 4: r sends chunk r-1 (just received), receives r-2
  //                   step 5: r sends chunk r-2, receives r-3: now has them all
  //
  // The rule behind it: what arrives at one step is what leaves at the next, so a
  // chunk walks once around the ring collecting one contribution per rank (P-1 hops
  // in the first half), and then once more, as a finished result, in the second.
  // Rank r sends chunk (r - s - 1) at reduce-scatter step s; its right neighbour
  // r + 1 receives ((r + 1) - s - 2) = the same chunk.
  const auto mod = [world_size](int x) { return ((x % world_size) + world_size) % world_size; };
  if (step < world_size - 1) {
    return RingStep{mod(rank - step - 1), mod(rank - step - 2), true};
  }
  const int t = step - (world_size - 1);
  return RingStep{mod(rank - t), mod(rank - t - 1), false};
  // END SOLUTION
}

}  // namespace dtl::lab03
