// Lab 02, task B: scatter and gather along binomial trees.
//
// What this file teaches: how a tree moves *different* data to every rank. In a
// scatter the root holds P blocks of b bytes (n = P * b in all), one per rank.
//
//   linear:    the root sends P - 1 messages, one per rank
//              (P-1) * alpha + (P-1)/P * n * beta
//   binomial:  the root sends ceil(log2 P) messages, each carrying a whole subtree's
//              blocks; every other rank receives once and forwards what is not its own
//              ceil(log2 P) * alpha + (P-1)/P * n * beta
//
// The bandwidth term is the same: every byte that is not the root's own must leave
// the root once, whichever way it goes. The tree wins on latency, P - 1 against
// ceil(log2 P) message start-ups, which is what matters for the small blocks a
// scatter usually carries. (The tree moves more bytes in total — a block travels
// down several edges — but on different links at the same time.)
//
// A gather is the same tree with the arrows reversed and the rounds in reverse
// order. Which blocks travel down (or up) each edge, and in what order a rank keeps
// them so that every message is one contiguous piece, is handout Task B.
//
// What it leaves out: MPI derived datatypes, which could describe blocks that are
// not contiguous without a local copy.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace dtl::lab02 {

template <Element T>
void scatter(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int root, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_rank("scatter", "root", root, size);
  require_tag("scatter", tag);
  const std::size_t total = recv_buf.size() * static_cast<std::size_t>(size);
  DTL_REQUIRE_ARG(send_buf.size() == total || (rank != root && send_buf.empty()), "scatter", "send_buf",
                  "has " + std::to_string(send_buf.size()) + " elements; it must hold " + std::to_string(size) +
                      " blocks of recv_buf.size() = " + std::to_string(recv_buf.size()) +
                      " (on a rank other than the root it may also be empty)");
  to_mpi_count(total, "scatter", "recv_buf");
  if (recv_buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const std::size_t block = recv_buf.size();

  // TODO(student): On return rank r's recv_buf holds block r (count elements) of the root's send_buf. Over
  //   the binomial tree: non-roots receive exactly once; the root sends exactly L messages
  //   carrying (P - 1) count elements in all, nobody more than L; all on `tag`. send_buf is
  //   read on the root only (elsewhere it may be empty) (handout Task B, sections (a), (d)).
  throw dtl::NotImplemented("scatter");
}

template <Element T>
void gather(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int root, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_rank("gather", "root", root, size);
  require_tag("gather", tag);
  const std::size_t total = send_buf.size() * static_cast<std::size_t>(size);
  DTL_REQUIRE_ARG(recv_buf.size() == total || (rank != root && recv_buf.empty()), "gather", "recv_buf",
                  "has " + std::to_string(recv_buf.size()) + " elements; it must hold " + std::to_string(size) +
                      " blocks of send_buf.size() = " + std::to_string(send_buf.size()) +
                      " (on a rank other than the root it may also be empty)");
  to_mpi_count(total, "gather", "send_buf");
  if (send_buf.empty()) return;
  const MPI_Datatype type = mpi_datatype<T>();
  const std::size_t block = send_buf.size();

  // TODO(student): On return block r of the root's recv_buf holds rank r's send_buf (rank order, for any
  //   root). Over the binomial tree: non-roots send exactly once, the root receives exactly L
  //   messages and nobody more than L; all on `tag`. recv_buf is written on the root only
  //   (elsewhere it may be empty) (handout Task B, section (d)).
  throw dtl::NotImplemented("gather");
}

// The element types of the lab (dtl::Element): one instance of each function per type.
template void scatter<float>(MPI_Comm, std::span<const float>, std::span<float>, int, int);
template void scatter<double>(MPI_Comm, std::span<const double>, std::span<double>, int, int);
template void scatter<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, int, int);
template void gather<float>(MPI_Comm, std::span<const float>, std::span<float>, int, int);
template void gather<double>(MPI_Comm, std::span<const double>, std::span<double>, int, int);
template void gather<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, int, int);

}  // namespace dtl::lab02
