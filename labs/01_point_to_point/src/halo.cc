// Lab 01, task C: nonblocking halo (ghost-cell) exchange on a 1-D grid.
//
// What this file teaches: the communication pattern of every stencil code
// (and, later, of pipeline stages passing activations to their neighbours).
// Each rank owns a piece of the grid plus `halo` ghost cells on each side that
// mirror its neighbours' edge cells. Posting all receives and sends first and
// waiting once lets the four transfers proceed together, in any order, with no
// chance of a cycle of blocking calls.
//
//     rank r field:  [ L ghosts | owned 0 .. n-1 | R ghosts ]
//     owned[0 .. halo)      --> rank r-1's R ghosts
//     owned[n-halo .. n)    --> rank r+1's L ghosts
#include <mpi.h>

#include <array>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab01/point_to_point.h"

namespace dtl::lab01 {

void halo_exchange(MPI_Comm comm, std::span<double> field, std::size_t halo, bool periodic, int tag) {
  DTL_REQUIRE_ARG(field.size() >= 3 * halo, "halo_exchange", "field",
                  "has " + std::to_string(field.size()) + " cells; with halo " + std::to_string(halo) +
                      " it needs at least " + std::to_string(3 * halo) + " (two ghost regions and " +
                      std::to_string(halo) + " owned cells to send)");
  require_tag("halo_exchange", tag);
  const int count = to_mpi_count(halo, "halo_exchange", "halo");
  const auto [rank, size] = rank_and_size(comm);
  if (halo == 0) return;
  const std::size_t n = field.size() - 2 * halo;  // owned cells

  // TODO(student): On return the left ghosts field[0, halo) hold the left neighbour's last `halo` owned
  //   cells and the right ghosts field[halo + n, n + 2 halo) its right neighbour's first
  //   `halo` (layout: handout Task C). With `periodic` the ends wrap around; without it the
  //   outer ghosts of ranks 0 and P-1 stay untouched. Only MPI_Irecv/MPI_Isend and a wait,
  //   all on `tag`, no blocking send/receive; correct at every P (1 included) and at any size
  //   (sections (b), (d)).
  throw dtl::NotImplemented("halo_exchange");
}

}  // namespace dtl::lab01
