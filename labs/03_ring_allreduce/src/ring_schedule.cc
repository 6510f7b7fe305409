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
  // TODO(student): Return RingStep{send_chunk, recv_chunk, reduce} for (rank, P, step), chunks in [0, P).
  //   The table must satisfy the invariants in lab03/ring.h: what rank r sends is what rank
  //   r+1 receives; steps 0 .. P-2 reduce, and after them rank r holds chunk r complete;
  //   steps P-1 .. 2P-3 copy and spread every complete chunk to every rank, each rank's
  //   contribution counted exactly once (handout Task A, section (b)). The argument checks
  //   are written above.
  throw dtl::NotImplemented("ring_step");
}

}  // namespace dtl::lab03
