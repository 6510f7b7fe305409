// Lab 03, task C: the segmented ring — pipelining the ring inside each step.
//
// What this file teaches: in ring_allreduce.cc a step is all-or-nothing. A rank
// receives a whole chunk, then adds it, then sends it on; while it adds, its
// link is idle, and while the chunk is in flight, its adder is idle. Cut each
// chunk into segments and the two overlap: segment k is added and sent on while
// segment k+1 is still arriving.
//
//   unsegmented, one step:   [ receive chunk ][ add chunk ][ send chunk ]...
//   segmented:               [recv s0][recv s1][recv s2]
//                                     [add s0 ][add s1 ][add s2 ]
//                                              [send s0][send s1][send s2]
//
// With k segments a step costs about (1 + 2/k) of the slower of the two instead
// of the sum of both, plus k alphas: small segments pay latency, big ones lose
// the overlap. NCCL does the same with its "slices" (see the handout).
//
// The schedule is unchanged (ring_step()), and so are the bytes: only the number
// of messages grows. Every rank posts its receives one step ahead, so a segment
// never waits in MPI's unexpected-message queue, and forwards each segment the
// moment it is ready. Sends and receives of one (comm, tag, peer) pair match in
// the order they are posted (MPI's non-overtaking rule), so one tag suffices:
// both sides walk the same steps and cut each chunk into the same segments.
//
// Two buffer rules, the kind of thing that makes pipelined code go wrong:
//   - reduce-scatter receives go into scratch, alternating between two (the
//     next step's receives are posted while this step's scratch is in use);
//   - the allgather receives chunk c straight into buf, but at reduce-scatter
//     step t this rank sent chunk c from buf with MPI_Isend: that send must be
//     complete before the receive may overwrite the memory (MPI forbids touching
//     a pending send's buffer). So the allgather step t first waits for the sends
//     of reduce-scatter step t.
//
// The price of posting a whole step ahead: a chunk of k segments keeps 2k
// requests in flight. MPI libraries keep pending requests in lists they walk,
// so k in the hundreds of thousands (1-element segments of a 4 MiB chunk) is
// orders of magnitude slower than k in the tens; real segment sizes are KiBs.
//
// What it leaves out: choosing the segment size automatically (the benchmark
// sweeps it), a bounded window of requests, and several rings at once.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab03/ring.h"

namespace dtl::lab03 {

template <Element T>
void allreduce_ring_segmented(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag, std::size_t segment_elements) {
  const auto [rank, size] = rank_and_size(comm);
  require_tag("allreduce_ring_segmented", tag);
  require_op("allreduce_ring_segmented", op, {ReduceOp::kSum, ReduceOp::kAvg});
  DTL_REQUIRE_ARG(segment_elements >= 1, "allreduce_ring_segmented", "segment_elements",
                  "is 0; a segment must hold at least one element");
  to_mpi_count(buf.size(), "allreduce_ring_segmented", "buf");
  if (buf.empty() || size == 1) return;  // one rank: the sum and the average are buf itself
  const MPI_Datatype type = mpi_datatype<T>();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  const int steps = 2 * (size - 1);

  // TODO(student): Same result as allreduce_ring (sum or average) with the same schedule (ring_step()),
  //   but each chunk that moves travels as segments_of(chunk size, segment_elements) messages
  //   of at most segment_elements elements, so that receiving, adding and sending overlap
  //   (section (e) and the header of this file). MPI_Isend/MPI_Irecv/MPI_Wait(all) only,
  //   every message on `tag`, no buffer touched while a pending request uses it, nothing
  //   pending on return (handout Task C).
  throw dtl::NotImplemented("allreduce_ring_segmented");
}

#define DTL_LAB03_INSTANTIATE(T) \
  template void allreduce_ring_segmented<T>(MPI_Comm, std::span<T>, ReduceOp, int, std::size_t);
DTL_LAB03_INSTANTIATE(float)
DTL_LAB03_INSTANTIATE(double)
DTL_LAB03_INSTANTIATE(std::int32_t)
#undef DTL_LAB03_INSTANTIATE

}  // namespace dtl::lab03
