// Lab 01, task A: ping-pong.
//
// What this file teaches: the round trip that every latency and bandwidth number
// in this course comes from. One rank sends, the other echoes, and the first
// times the loop. Half a round trip is the one-way time that the alpha-beta
// model (alpha_beta.cc) describes.
//
// What it leaves out: warm-up iterations and statistics (the benchmark,
// bench/ping_pong_bench.cc, takes medians over many calls).
#include <mpi.h>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab01/point_to_point.h"

namespace dtl::lab01 {

double ping_pong(MPI_Comm comm, std::span<const std::byte> send_buf, std::span<std::byte> recv_buf,
                 int initiator, int responder, int iterations, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_rank("ping_pong", "initiator", initiator, size);
  DTL_REQUIRE_ARG(responder >= 0 && responder < size && responder != initiator, "ping_pong", "responder",
                  "is " + std::to_string(responder) + "; it must be a rank other than the initiator (" +
                      std::to_string(initiator) + ") in a " + std::to_string(size) + "-rank communicator");
  DTL_REQUIRE_ARG(iterations >= 1, "ping_pong", "iterations", "must be at least 1");
  require_tag("ping_pong", tag);
  DTL_REQUIRE_ARG(recv_buf.size() == send_buf.size(), "ping_pong", "recv_buf",
                  "has " + std::to_string(recv_buf.size()) + " bytes; send_buf has " +
                      std::to_string(send_buf.size()));
  const int count = to_mpi_count(send_buf.size(), "ping_pong", "send_buf");

  // BEGIN SOLUTION(ping_pong)
  // | `iterations` round trips of send_buf between initiator and responder on `tag` (peers
  // | named, no wildcards, one message per direction per iteration, even at 0 bytes). The
  // | responder echoes what it received (into its recv_buf); the initiator ends with the echo
  // | in recv_buf and returns the mean seconds per round trip (MPI_Wtime); every other rank
  // | returns 0.0 and ranks outside the pair send nothing (handout Task A, section (a)).
  if (rank == initiator) {
    const double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      DTL_MPI_CHECK(MPI_Send(send_buf.data(), count, MPI_BYTE, responder, tag, comm));
      DTL_MPI_CHECK(MPI_Recv(recv_buf.data(), count, MPI_BYTE, responder, tag, comm, MPI_STATUS_IGNORE));
    }
    return (MPI_Wtime() - start) / iterations;
  }
  if (rank == responder) {
    for (int i = 0; i < iterations; ++i) {
      // The echo must wait for the message: receive first, then send it back.
      DTL_MPI_CHECK(MPI_Recv(recv_buf.data(), count, MPI_BYTE, initiator, tag, comm, MPI_STATUS_IGNORE));
      DTL_MPI_CHECK(MPI_Send(recv_buf.data(), count, MPI_BYTE, initiator, tag, comm));
    }
  }
  return 0.0;
  // END SOLUTION
}

}  // namespace dtl::lab01
