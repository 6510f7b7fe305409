// Lab 02, task A: broadcast from point-to-point messages.
//
// What this file teaches: the two broadcasts every MPI library carries, and why
// it carries two. In the alpha-beta model of lab 01 (a message of n bytes costs
// alpha + n * beta), with P ranks and L = ceil(log2 P):
//
//   binomial tree          L * alpha  +  L * n * beta
//   scatter + allgather    (L + P - 1) * alpha  +  2 (P-1)/P * n * beta
//
// The tree is latency-optimal: L rounds is the least any broadcast can take,
// since the number of ranks holding the data at most doubles per round. But it
// sends the whole message in every round, so the bandwidth term grows with
// log P. Van de Geijn's broadcast cuts the message into P chunks, scatters them
// down the same tree (each rank gets n/P bytes) and then passes them around a
// ring (P - 1 steps of n/P bytes): every byte crosses about two links whatever
// P is, at the price of P - 1 extra latencies. Setting the two equal gives the
// crossover
//
//   n* = (P - 1) * alpha / ((L - 2 (P-1)/P) * beta)
//
// which for P = 4 is 6 alpha / beta: about 176 KB with lab 01's fit over the
// rendezvous sizes (alpha = 2.5 us, beta = 0.086 ns/B), the sizes a broadcast's
// chunks have there. For P = 2 the denominator is 0: the tree always wins, and
// broadcast() below never leaves it. (The model assumes every rank has its own
// core and link; on the 2-core course machine the tree wins at 3 and 4 ranks too —
// see labs/02_collectives/bench/RESULTS.md.)
//
// The tree's shape is drawn in section (a) of the handout; walking it from any
// root (each rank's parent, children and round) is task A's derivation, with the
// handout's hints. What the tests count (messages per rank, bytes, the tag) is each
// function's contract below.
//
// What it leaves out: pipelining (cutting the message into segments so that a
// chain or tree streams them; lab 03 does it for the ring), and the hierarchy
// real libraries use across nodes.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace dtl::lab02 {

template <Element T>
void broadcast_binomial(MPI_Comm comm, std::span<T> buf, int root, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_rank("broadcast_binomial", "root", root, size);
  require_tag("broadcast_binomial", tag);
  const int count = to_mpi_count(buf.size(), "broadcast_binomial", "buf");
  if (count == 0) return;  // nothing to send (every rank has the same count)
  const MPI_Datatype type = mpi_datatype<T>();

  // BEGIN SOLUTION(broadcast_binomial)
  // | On return every rank's buf equals the root's, for any root and any P. Over the binomial
  // | tree of section (a): non-roots receive exactly once, the root receives nothing and sends
  // | exactly L = ceil(log2 P) messages, nobody sends more than L, P - 1 messages in all, each
  // | of the whole buffer, all on `tag`; blocking MPI_Send/MPI_Recv are safe (a tree has no
  // | cycle of waits). A bad root or tag is refused above (dtl::InvalidArgument naming it, on
  // | every rank, before any message). Which rank sends to which, from rank, root and size
  // | alone, is the task (handout Task A and its hints; the counts are section (e)'s).
  const int vrank = (rank - root + size) % size;
  int mask = 1;
  while (mask < size) {
    if (vrank & mask) {
      const int parent = (vrank - mask + root) % size;
      DTL_MPI_CHECK(MPI_Recv(buf.data(), count, type, parent, tag, comm, MPI_STATUS_IGNORE));
      break;
    }
    mask <<= 1;
  }
  // Largest subtree first: it has the most rounds still to go.
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < size) {
      const int child = (vrank + mask + root) % size;
      DTL_MPI_CHECK(MPI_Send(buf.data(), count, type, child, tag, comm));
    }
  }
  // END SOLUTION
}

template <Element T>
void broadcast_scatter_allgather(MPI_Comm comm, std::span<T> buf, int root, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_rank("broadcast_scatter_allgather", "root", root, size);
  require_tag("broadcast_scatter_allgather", tag);
  to_mpi_count(buf.size(), "broadcast_scatter_allgather", "buf");
  if (buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();

  // BEGIN SOLUTION(broadcast_scatter_allgather)
  // | Same result as broadcast_binomial, by section (c): the root's buffer cut into the P
  // | chunks of section (d) (some may be short or empty), scattered down the tree, then
  // | completed around the ring. At most L + P - 1 messages per rank; the root sends at most
  // | 2 (n - floor(n / P)) elements' worth of bytes. Both ends of every message agree on it,
  // | even at 0 elements (handout Task A).
  const int vrank = (rank - root + size) % size;
  const std::size_t n = buf.size();
  const std::size_t chunk = (n + size - 1) / size;
  // The elements of chunks [first, last) of buf, as a pointer and an MPI count.
  auto chunks = [&](int first, int last) {
    const std::size_t begin = std::min(n, static_cast<std::size_t>(first) * chunk);
    const std::size_t end = std::min(n, static_cast<std::size_t>(last) * chunk);
    return std::pair<T*, int>(buf.data() + begin, static_cast<int>(end - begin));
  };

  // (1) Scatter: the binomial tree, but each edge carries only the child's subtree.
  int mask = 1;
  while (mask < size) {
    if (vrank & mask) {
      const auto [data, elements] = chunks(vrank, std::min(vrank + mask, size));
      const int parent = (vrank - mask + root) % size;
      DTL_MPI_CHECK(MPI_Recv(data, elements, type, parent, tag, comm, MPI_STATUS_IGNORE));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    const int child = vrank + mask;
    if (child < size) {
      const auto [data, elements] = chunks(child, std::min(child + mask, size));
      DTL_MPI_CHECK(MPI_Send(data, elements, type, (child + root) % size, tag, comm));
    }
  }

  // (2) Ring allgather: vrank v + 1 is real rank + 1, so the ring is the plain one.
  // Step s passes on the chunk that arrived in step s - 1 (step 0: our own), so
  // after size - 1 steps every chunk has visited every rank.
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  for (int step = 0; step < size - 1; ++step) {
    const int send_chunk = (vrank - step + size) % size;
    const int recv_chunk = (vrank - step - 1 + size) % size;
    const auto [send_data, send_elements] = chunks(send_chunk, send_chunk + 1);
    const auto [recv_data, recv_elements] = chunks(recv_chunk, recv_chunk + 1);
    DTL_MPI_CHECK(MPI_Sendrecv(send_data, send_elements, type, right, tag,  //
                               recv_data, recv_elements, type, left, tag, comm, MPI_STATUS_IGNORE));
  }
  // END SOLUTION
}

template <Element T>
void broadcast(MPI_Comm comm, std::span<T> buf, int root, int tag, std::size_t switch_bytes) {
  const int size = rank_and_size(comm).size;
  require_rank("broadcast", "root", root, size);
  require_tag("broadcast", tag);

  // BEGIN SOLUTION(broadcast)
  // | Choose between the two broadcasts above by size and rank count, as handout Task A and
  // | section (c) say (the tree with 1 or 2 ranks); every rank must make the same choice.
  if (size >= 3 && buf.size_bytes() >= switch_bytes) {
    broadcast_scatter_allgather(comm, buf, root, tag);
  } else {
    broadcast_binomial(comm, buf, root, tag);
  }
  // END SOLUTION
}

// The element types of the lab (dtl::Element): one instance of each function per type.
template void broadcast_binomial<float>(MPI_Comm, std::span<float>, int, int);
template void broadcast_binomial<double>(MPI_Comm, std::span<double>, int, int);
template void broadcast_binomial<std::int32_t>(MPI_Comm, std::span<std::int32_t>, int, int);
template void broadcast_scatter_allgather<float>(MPI_Comm, std::span<float>, int, int);
template void broadcast_scatter_allgather<double>(MPI_Comm, std::span<double>, int, int);
template void broadcast_scatter_allgather<std::int32_t>(MPI_Comm, std::span<std::int32_t>, int, int);
template void broadcast<float>(MPI_Comm, std::span<float>, int, int, std::size_t);
template void broadcast<double>(MPI_Comm, std::span<double>, int, int, std::size_t);
template void broadcast<std::int32_t>(MPI_Comm, std::span<std::int32_t>, int, int, std::size_t);

}  // namespace dtl::lab02
