// Lab 02, task D: allgather, around a ring and by recursive doubling.
//
// What this file teaches: two schedules for "everyone gets everyone's block",
// with the same bandwidth term and different latency terms. Each rank has a block
// of b bytes; the result on every rank is n = P * b bytes, of which it must
// receive the (P-1)/P that is not its own — no algorithm can do with less.
//
//   ring                (P-1) * alpha     + (P-1)/P * n * beta
//   recursive doubling  log2(P) * alpha   + (P-1)/P * n * beta     (P a power of two)
//
// Why the ring is the bandwidth-optimal schedule (and the one NCCL uses) and how
// recursive doubling gets by with log2 P steps is handout Task D (its hints draw
// both schedules for small P).
//
// What it leaves out: the non-power-of-two variants of recursive doubling, and
// Bruck's algorithm (ceil(log2 P) steps for any P, with a local rotation).
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace dtl::lab02 {

template <Element T>
void allgather_ring(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_tag("allgather_ring", tag);
  require_blocks("allgather_ring", "recv_buf", recv_buf.size(), send_buf.size(), size);
  to_mpi_count(recv_buf.size(), "allgather_ring", "recv_buf");
  if (send_buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const std::size_t block = send_buf.size();
  const int count = static_cast<int>(block);

  // TODO(student): On return recv_buf holds every rank's send_buf, block k (count elements) from rank k,
  //   on every rank. A ring: each rank talks only to its two neighbours, exactly P - 1
  //   messages of one block each, all on `tag`, no wildcards, no vendor collective, no
  //   deadlock at any size (handout Task D, sections (d), (e)).
  throw dtl::NotImplemented("allgather_ring");
}

template <Element T>
void allgather_recursive_doubling(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  DTL_REQUIRE_ARG((size & (size - 1)) == 0, "allgather_recursive_doubling", "comm",
                  "has " + std::to_string(size) +
                      " ranks; recursive doubling needs a power of two (1, 2, 4, 8, ...): use allgather_ring");
  require_tag("allgather_recursive_doubling", tag);
  require_blocks("allgather_recursive_doubling", "recv_buf", recv_buf.size(), send_buf.size(), size);
  to_mpi_count(recv_buf.size(), "allgather_recursive_doubling", "recv_buf");
  if (send_buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const std::size_t block = send_buf.size();

  // TODO(student): Same result as allgather_ring (block k of recv_buf from rank k), in exactly log2 P
  //   messages per rank and (P - 1) count elements received in all, all on `tag` (handout
  //   Task D). P is a power of two here (checked above).
  throw dtl::NotImplemented("allgather_recursive_doubling");
}

// The element types of the lab (dtl::Element): one instance of each function per type.
template void allgather_ring<float>(MPI_Comm, std::span<const float>, std::span<float>, int);
template void allgather_ring<double>(MPI_Comm, std::span<const double>, std::span<double>, int);
template void allgather_ring<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, int);
template void allgather_recursive_doubling<float>(MPI_Comm, std::span<const float>, std::span<float>, int);
template void allgather_recursive_doubling<double>(MPI_Comm, std::span<const double>, std::span<double>, int);
template void allgather_recursive_doubling<std::int32_t>(MPI_Comm, std::span<const std::int32_t>,
                                                         std::span<std::int32_t>, int);

}  // namespace dtl::lab02
