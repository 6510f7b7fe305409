// Lab 02, task E: all-to-all by pairwise exchange.
//
// What this file teaches: the collective behind the transpose of a distributed
// matrix, a parallel FFT, and the token routing of mixture-of-experts layers.
// Every rank has a different block for every other rank, so nothing can be
// shared or combined on the way: each rank must send (P-1) blocks and receive
// (P-1) blocks, b bytes each.
//
//   pairwise exchange   (P-1) * (alpha + b * beta)
//
// The naive version, every rank posting its P - 1 MPI_Isend in rank order (to
// rank 0 first), is fine for small blocks, but then every rank sends to the same
// receiver at the same time while the others wait. Pairwise exchange runs P - 1
// rounds in each of which every rank sends exactly one block and receives exactly
// one; which partners meet in which round is handout Task E.
//
// What it leaves out: Bruck's algorithm (log2 P steps that forward blocks in
// bundles, better for tiny blocks), and the v-variant with different sizes per
// pair (MPI_Alltoallv, what MoE routing really needs).
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
void alltoall_pairwise(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_tag("alltoall_pairwise", tag);
  DTL_REQUIRE_ARG(send_buf.size() % static_cast<std::size_t>(size) == 0, "alltoall_pairwise", "send_buf",
                  "has " + std::to_string(send_buf.size()) + " elements, not " + std::to_string(size) +
                      " blocks of equal size");
  DTL_REQUIRE_ARG(recv_buf.size() == send_buf.size(), "alltoall_pairwise", "recv_buf",
                  "has " + std::to_string(recv_buf.size()) + " elements; send_buf has " +
                      std::to_string(send_buf.size()));
  to_mpi_count(send_buf.size(), "alltoall_pairwise", "send_buf");
  const std::size_t block = send_buf.size() / static_cast<std::size_t>(size);
  if (block == 0) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const int count = static_cast<int>(block);

  // TODO(student): On return block s of recv_buf on rank r holds block r of rank s's send_buf (blocks of
  //   `block` elements, rank order, no rotation). Exactly P - 1 messages sent and P - 1
  //   received per rank, nothing sent to yourself, all on `tag`, deadlock-free at any size
  //   (handout Task E).
  throw dtl::NotImplemented("alltoall_pairwise");
}

// The element types of the lab (dtl::Element): one instance per type.
template void alltoall_pairwise<float>(MPI_Comm, std::span<const float>, std::span<float>, int);
template void alltoall_pairwise<double>(MPI_Comm, std::span<const double>, std::span<double>, int);
template void alltoall_pairwise<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>,
                                              int);

}  // namespace dtl::lab02
