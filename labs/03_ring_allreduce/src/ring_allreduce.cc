// Lab 03, task B: the ring allreduce = ring reduce-scatter + ring allgather.
//
// What this file teaches: the allreduce that moves the fewest bytes. Every rank
// holds n elements; the buffer is cut into P chunks (chunk_begin() in ring.h).
//
//   reduce-scatter (P-1 steps)            allgather (P-1 steps)
//   send a chunk right,                   send the chunk finished last,
//   receive one from the left into        receive the next finished one from
//   scratch, add it into buf              the left straight into buf
//
// P = 3, chunks a b c (chunks 0, 1, 2); "a12" is chunk a summed over ranks 1 and 2.
// Each rank receives from its left neighbour (rank 0's left is rank 2):
//
//              rank 0             rank 1             rank 2
//   start      a0  b0  c0         a1  b1  c1         a2  b2  c2
//   RS step 0  gets b2:   b02     gets c0:   c01     gets a1:   a12
//   RS step 1  gets a12:  a012    gets b02:  b012    gets c01:  c012   <- rank r owns chunk r
//   AG step 0  gets c012          gets a012          gets b012
//   AG step 1  gets b012          gets c012          gets a012         <- every rank has all
//
// The rule behind the table (ring_step(), task A): at each reduce-scatter step
// rank r receives the chunk to which its left neighbour added its own
// contribution the step before; after P-1 steps chunk r has passed through all
// P ranks and ends, complete, on rank r. The allgather sends each complete chunk
// once more around.
//
// Bytes: each step sends one chunk, about n/P elements, so each rank sends
// 2(P-1)/P n in all. Any allreduce must do at least that much (see the handout:
// each rank must send out (P-1)/P n to be reduced elsewhere and receive (P-1)/P n
// of results), so the ring is bandwidth-optimal; its price is 2(P-1) latencies,
// which is why small messages use trees instead (lab 02's reduce + broadcast).
//
// Why MPI_Sendrecv: every rank sends and receives in the same step; a blocking
// MPI_Send first would deadlock the ring beyond the eager limit (lab 01).
//
// What it leaves out: overlapping the send of one piece with the addition of the
// next (ring_segmented.cc), and several rings at once (NCCL's channels).
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab03/ring.h"

namespace dtl::lab03 {
template <Element T>
void reduce_scatter_ring(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_tag("reduce_scatter_ring", tag);
  require_op("reduce_scatter_ring", op, {ReduceOp::kSum, ReduceOp::kAvg});
  to_mpi_count(buf.size(), "reduce_scatter_ring", "buf");
  if (buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;

  // TODO(student): On return chunk `rank` of buf (chunk layout: chunk_begin/chunk_count) holds the sum
  //   over all ranks (the average for ReduceOp::kAvg, divided once, section (d)); the other
  //   chunks hold partial sums. Follow ring_step()'s schedule, steps 0 .. P-2: exactly one
  //   message per step, even of 0 elements, to `right`, from `left`, on `tag`; deadlock-free
  //   at any count (handout Task B).
  throw dtl::NotImplemented("reduce_scatter_ring");
}

template <Element T>
void allgather_ring(MPI_Comm comm, std::span<T> buf, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_tag("allgather_ring", tag);
  to_mpi_count(buf.size(), "allgather_ring", "buf");
  if (buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;

  // TODO(student): Given chunk r complete on rank r (as reduce_scatter_ring leaves it), on return every
  //   rank's buf holds every complete chunk. Follow ring_step()'s allgather steps: one
  //   message per step, on `tag`, to `right`, from `left` (handout Task B).
  throw dtl::NotImplemented("allgather_ring");
}

template <Element T>
void allreduce_ring(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag) {
  require_tag("allreduce_ring", tag);
  require_op("allreduce_ring", op, {ReduceOp::kSum, ReduceOp::kAvg});
  to_mpi_count(buf.size(), "allreduce_ring", "buf");
  // TODO(student): On return every rank's buf holds the sum (or average) over all ranks, from the two
  //   functions above (handout Task B).
  throw dtl::NotImplemented("allreduce_ring");
}

#define DTL_LAB03_INSTANTIATE(T)                                          \
  template void reduce_scatter_ring<T>(MPI_Comm, std::span<T>, ReduceOp, int); \
  template void allgather_ring<T>(MPI_Comm, std::span<T>, int);          \
  template void allreduce_ring<T>(MPI_Comm, std::span<T>, ReduceOp, int);
DTL_LAB03_INSTANTIATE(float)
DTL_LAB03_INSTANTIATE(double)
DTL_LAB03_INSTANTIATE(std::int32_t)
#undef DTL_LAB03_INSTANTIATE

}  // namespace dtl::lab03
