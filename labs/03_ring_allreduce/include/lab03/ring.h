/// @file
/// @brief Lab 03, part 1 — the ring allreduce over MPI: the API you implement in src/.
///
/// The bandwidth-optimal allreduce is two rings in a row:
///
///   reduce-scatter   P-1 steps; after them rank r holds chunk r summed over all ranks
///   allgather        P-1 steps; after them every rank holds every summed chunk
///
/// Each of the 2(P-1) steps sends one chunk (about n/P elements) to the right
/// neighbour and receives one from the left, so each rank sends 2(P-1)/P of the
/// data in all: the lower bound for any allreduce (see the handout), and what NCCL
/// does on every ring.
///
/// Files under src/:
///   - ring_schedule.cc   ring_step(): which chunk a rank sends and receives at each step
///                        (shared with part 2, the CUDA rings)
///   - ring_allreduce.cc  reduce_scatter_ring(), allgather_ring(), allreduce_ring()
///   - ring_segmented.cc  allreduce_ring_segmented(): the same ring, each chunk cut into
///                        segments so that sending one overlaps reducing the next
///
/// Conventions (as in labs 01 and 02): `comm` is the communicator to use; counts are
/// in elements, sizes in bytes; every message carries `tag`; receives name their
/// source and tag; only point-to-point MPI is allowed (the tests trace every MPI call
/// and fail on MPI_Allreduce, MPI_Reduce_scatter, ...). Every function checks its
/// arguments on every rank and throws dtl::InvalidArgument naming the bad one. Every
/// function is collective: every rank of `comm` calls it with the same count, op and
/// tag, in the same order.
///
/// In place. The ring works inside the caller's buffer, as NCCL does and as DDP
/// needs (gradients are reduced where they lie): no extra copy of the data, only
/// one chunk of scratch for what arrives from the left.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "harness/dtype.h"
#include "harness/reduce_op.h"

namespace dtl::lab03 {

// The element types (dtl::Element: float, double, std::int32_t) and the
// reductions (dtl::ReduceOp: the ring takes kSum and kAvg) are the harness's:
// harness/dtype.h and harness/reduce_op.h.

// ---------------------------------------------------------------------------
// Chunks: given to you — the tests and part 2 rely on this exact layout
// ---------------------------------------------------------------------------

/// @brief Where chunk `chunk` of a `count`-element buffer split over `world_size` ranks begins.
///
/// The first count % P chunks hold one element more than the others, so chunk
/// sizes differ by at most one and a count smaller than P leaves some chunks
/// empty: count 10 over P = 4 gives chunks of 3, 3, 2, 2 starting at 0, 3, 6, 8.
/// @param[in] count the elements of the whole buffer.
/// @param[in] world_size P, the number of chunks (>= 1).
/// @param[in] chunk the chunk index, in [0, P]; chunk_begin(count, P, P) == count.
/// @return the index of the chunk's first element.
constexpr std::size_t chunk_begin(std::size_t count, int world_size, int chunk) {
  const auto p = static_cast<std::size_t>(world_size);
  const auto c = static_cast<std::size_t>(chunk);
  return c * (count / p) + std::min(c, count % p);
}

/// @brief The number of elements of chunk `chunk` (see chunk_begin()).
/// @param[in] count the elements of the whole buffer.
/// @param[in] world_size P, the number of chunks (>= 1).
/// @param[in] chunk the chunk index, in [0, P).
/// @return count / P, plus one for the first count % P chunks.
constexpr std::size_t chunk_count(std::size_t count, int world_size, int chunk) {
  return chunk_begin(count, world_size, chunk + 1) - chunk_begin(count, world_size, chunk);
}

/// @brief Chunk `chunk` of `buf` as a span (the layout of chunk_begin()).
/// @tparam T the element type.
/// @param[in] buf the whole buffer.
/// @param[in] world_size P, the number of chunks (>= 1).
/// @param[in] chunk the chunk index, in [0, P).
/// @return the view of elements [chunk_begin(chunk), chunk_begin(chunk + 1)) of `buf`.
template <typename T>
std::span<T> chunk_span(std::span<T> buf, int world_size, int chunk) {
  return buf.subspan(chunk_begin(buf.size(), world_size, chunk), chunk_count(buf.size(), world_size, chunk));
}

// ---------------------------------------------------------------------------
// Task A: the schedule (ring_schedule.cc)
// ---------------------------------------------------------------------------

/// @brief One step of the ring, seen from one rank.
struct RingStep {
  int send_chunk;  ///< the chunk this rank sends to its right neighbour, rank + 1
  int recv_chunk;  ///< the chunk it receives from its left neighbour, rank - 1
  bool reduce;     ///< true in the reduce-scatter half: add what arrives; false: copy it
};

/// @brief The whole ring allreduce as a table: what `rank` does at step `step`.
///
/// Steps 0 .. P-2 are the reduce-scatter, steps P-1 .. 2P-3 the allgather. The
/// schedule must satisfy, for every step: what rank r sends is what rank r+1
/// receives (send_chunk(r) == recv_chunk(r+1)); the reduce-scatter ends with the
/// complete sum of chunk r on rank r; the allgather then spreads chunk r from rank
/// r. Part 1 (MPI) and part 2 (CUDA, one kernel per step) both follow this table.
/// @param[in] rank the rank, in [0, world_size).
/// @param[in] world_size P >= 2 (a ring of one rank has no steps).
/// @param[in] step in [0, 2(P-1)).
/// @return the chunks to send and receive, and whether to reduce or copy.
/// @throws InvalidArgument naming `rank`, `world_size` or `step` when it is out of range.
RingStep ring_step(int rank, int world_size, int step);

// ---------------------------------------------------------------------------
// Task B: the ring (ring_allreduce.cc)
// ---------------------------------------------------------------------------

/// @brief Ring reduce-scatter in place: chunk `rank` of `buf` becomes the reduction of chunk `rank` over all ranks.
///
/// P-1 steps of ring_step(): send a chunk right, receive one from the left into
/// scratch, add it into `buf`. The other chunks of `buf` are left holding partial
/// sums (unspecified). With ReduceOp::kAvg the finished chunk is divided by P, once.
/// Messages: exactly P-1 per rank (zero-length ones for empty chunks), none when
/// `buf` is empty; bytes sent: (count - chunk_count(rank)) elements.
/// Cost: (P-1) alpha + (P-1)/P n beta + (P-1)/P n gamma (gamma: time to add a byte).
///
/// Collective: every rank of `comm` must call it with the same count, op and tag.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf this rank's contribution (count elements, the same count everywhere);
///                    on return, chunk `rank` holds the result.
/// @param[in] op ReduceOp::kSum or ReduceOp::kAvg.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws InvalidArgument for a bad tag or a count MPI cannot describe.
template <Element T>
void reduce_scatter_ring(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag);

/// @brief Ring allgather in place: every rank's chunk `rank` ends up in every rank's `buf`.
///
/// P-1 steps of ring_step() (its allgather half): send right the chunk you
/// completed last, receive the next one from the left straight into `buf`.
/// Messages: exactly P-1 per rank, none when `buf` is empty; bytes sent:
/// (count - chunk_count(rank + 1)) elements. Cost: (P-1) alpha + (P-1)/P n beta.
///
/// Collective: every rank of `comm` must call it with the same count and tag.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf count elements; chunk `rank` is read, all other chunks are overwritten.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws InvalidArgument for a bad tag or a count MPI cannot describe.
template <Element T>
void allgather_ring(MPI_Comm comm, std::span<T> buf, int tag);

/// @brief Ring allreduce in place: reduce_scatter_ring() then allgather_ring().
///
/// On return every rank's `buf` holds the element-wise sum (or average) of all
/// ranks' `buf`. 2(P-1) messages per rank, 2(P-1)/P of the data sent in all.
/// Cost: 2(P-1) alpha + 2(P-1)/P n beta + (P-1)/P n gamma.
///
/// Collective: every rank of `comm` must call it with the same count, op and tag.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf this rank's contribution in, the result out (count elements everywhere).
/// @param[in] op ReduceOp::kSum or ReduceOp::kAvg.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws InvalidArgument for a bad tag or a count MPI cannot describe.
template <Element T>
void allreduce_ring(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag);

// ---------------------------------------------------------------------------
// Task C: the segmented (pipelined) ring (ring_segmented.cc)
// ---------------------------------------------------------------------------

/// @brief The number of segments a chunk of `chunk_elements` is cut into: ceil(chunk / segment), at least 1.
///
/// An empty chunk still makes one (empty) message, so that every step of the
/// ring has at least one message, as in reduce_scatter_ring().
/// @param[in] chunk_elements the chunk's size in elements.
/// @param[in] segment_elements the largest segment, in elements (>= 1).
/// @return max(1, ceil(chunk_elements / segment_elements)).
constexpr std::size_t segments_of(std::size_t chunk_elements, std::size_t segment_elements) {
  return std::max<std::size_t>(1, (chunk_elements + segment_elements - 1) / segment_elements);
}

/// @brief Ring allreduce with each chunk cut into segments, pipelined with nonblocking calls.
///
/// Same schedule, same result and same bytes as allreduce_ring(), but a chunk
/// travels as segments of at most `segment_elements`, and a segment is sent on
/// as soon as it has been reduced, while later segments are still arriving. The
/// receives of a step are posted before its segments are needed, so that the
/// network (or shared-memory copy) of one segment overlaps the addition of the
/// previous one. Messages per rank: the sum of segments_of() over the 2(P-1)
/// chunks it sends; all nonblocking (MPI_Isend, MPI_Irecv, MPI_Wait*).
///
/// Collective: every rank of `comm` must call it with the same count, op, tag and
/// segment size.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf this rank's contribution in, the result out.
/// @param[in] op ReduceOp::kSum or ReduceOp::kAvg.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @param[in] segment_elements the largest segment, in elements (>= 1).
/// @throws InvalidArgument for a bad tag, segment_elements == 0 or a count MPI cannot describe.
template <Element T>
void allreduce_ring_segmented(MPI_Comm comm, std::span<T> buf, ReduceOp op, int tag, std::size_t segment_elements);

}  // namespace dtl::lab03
