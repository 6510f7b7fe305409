// Lab 01, task B: shifting buffers around a ring without deadlock.
//
// What this file teaches: why "every rank sends, then every rank receives"
// hangs. MPI_Send may return as soon as the message is copied out (the eager
// protocol, small messages) or only once the receiver has posted the matching
// receive (rendezvous, large messages). In a ring every rank is a sender and a
// receiver; if all of them block in MPI_Send waiting for a receive that comes
// only after their own send, nobody moves: a cycle of waits, a deadlock.
//
// Three standard fixes:
//   1. MPI_Sendrecv: MPI does the send and the receive together;
//   2. ordering: even ranks send first, odd ranks receive first — except that
//      with one rank, rank 0 sends to itself before posting its receive, which
//      blocks above about 1 KiB; that case needs one of the other two;
//   3. nonblocking: MPI_Irecv, MPI_Isend, then MPI_Waitall.
// The reference uses the first.
#include <mpi.h>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab01/point_to_point.h"

namespace dtl::lab01 {

void ring_shift(MPI_Comm comm, std::span<const std::byte> send_buf, std::span<std::byte> recv_buf,
                int tag) {
  DTL_REQUIRE_ARG(recv_buf.size() == send_buf.size(), "ring_shift", "recv_buf",
                  "has " + std::to_string(recv_buf.size()) + " bytes; send_buf has " +
                      std::to_string(send_buf.size()));
  require_tag("ring_shift", tag);
  const int count = to_mpi_count(send_buf.size(), "ring_shift", "send_buf");
  const auto [rank, size] = rank_and_size(comm);

  // TODO(student): Every rank's send_buf arrives in the recv_buf of the next rank around the ring (rank
  //   P-1's at rank 0; with one rank, at itself), as exactly one message on `tag`, received
  //   from that named source. Must complete at every size and rank count, above the eager
  //   limit too (handout Task B, section (b)).
  throw dtl::NotImplemented("ring_shift");
}

}  // namespace dtl::lab01
