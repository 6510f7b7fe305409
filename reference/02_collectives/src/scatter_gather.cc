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

  // BEGIN SOLUTION(scatter)
  // | On return rank r's recv_buf holds block r (count elements) of the root's send_buf. Over
  // | the binomial tree: non-roots receive exactly once; the root sends exactly L messages
  // | carrying (P - 1) count elements in all, nobody more than L; all on `tag`. send_buf is
  // | read on the root only (elsewhere it may be empty) (handout Task B, sections (a), (d)).
  // P = 8, root 0 (vranks; [a, b) = the blocks of vranks a .. b-1):
  //   round 1:  0 ──[4,8)──▶ 4
  //   round 2:  0 ──[2,4)──▶ 2          4 ──[6,8)──▶ 6
  //   round 3:  0 ──[1,2)──▶ 1   2 ─▶ 3   4 ─▶ 5   6 ─▶ 7
  //
  // The subtree of vrank v is vranks [v, v + lowbit(v)), cut off at P; the root's
  // is all of them. Blocks are kept in *relative* order (vrank order) inside the
  // tree, so that a subtree is one contiguous range. With root 0 that is rank order;
  // with another root the root rotates the blocks once (a local copy of n bytes), so
  // every message is still one contiguous piece.
  const int vrank = (rank - root + size) % size;
  std::vector<T> staging;   // the subtree's blocks, when they are not in send_buf or recv_buf
  std::span<const T> held;  // blocks of vranks [vrank, vrank + subtree), in vrank order
  if (vrank == 0) {
    if (root == 0) {
      held = send_buf;
    } else {
      // Rotate: vranks 0 .. P-root-1 are ranks root .. P-1, the rest are 0 .. root-1.
      const auto split = send_buf.begin() + static_cast<std::ptrdiff_t>(root * block);
      staging.assign(split, send_buf.end());
      staging.insert(staging.end(), send_buf.begin(), split);
      held = staging;
    }
  }
  int mask = 1;
  while (mask < size) {
    if (vrank & mask) {
      const int subtree = std::min(mask, size - vrank);
      const int parent = (vrank - mask + root) % size;
      T* into = recv_buf.data();  // a leaf's only block is its own
      if (subtree > 1) {
        staging.resize(subtree * block);
        into = staging.data();
      }
      DTL_MPI_CHECK(MPI_Recv(into, static_cast<int>(subtree * block), type, parent, tag, comm, MPI_STATUS_IGNORE));
      held = std::span<const T>(into, subtree * block);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    const int child = vrank + mask;
    if (child < size) {
      const int blocks = std::min(mask, size - child);
      DTL_MPI_CHECK(MPI_Send(held.data() + mask * block, static_cast<int>(blocks * block), type,
                             (child + root) % size, tag, comm));
    }
  }
  if (held.data() != recv_buf.data()) std::copy_n(held.begin(), block, recv_buf.begin());
  // END SOLUTION
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

  // BEGIN SOLUTION(gather)
  // | On return block r of the root's recv_buf holds rank r's send_buf (rank order, for any
  // | root). Over the binomial tree: non-roots send exactly once, the root receives exactly L
  // | messages and nobody more than L; all on `tag`. recv_buf is written on the root only
  // | (elsewhere it may be empty) (handout Task B, section (d)).
  const int vrank = (rank - root + size) % size;
  int lowest_bit = 1;
  while (lowest_bit < size && !(vrank & lowest_bit)) lowest_bit <<= 1;
  const int subtree = std::min(lowest_bit, size - vrank);  // the root: lowest_bit >= size

  if (vrank != 0 && subtree == 1) {  // a leaf: nothing to collect
    const int parent = (vrank - lowest_bit + root) % size;
    DTL_MPI_CHECK(MPI_Send(send_buf.data(), static_cast<int>(block), type, parent, tag, comm));
    return;
  }
  std::vector<T> staging;
  std::span<T> collected = recv_buf;  // root 0 collects in place: vrank order is rank order
  if (root != 0 || vrank != 0) {
    staging.resize(subtree * block);
    collected = staging;
  }
  std::copy(send_buf.begin(), send_buf.end(), collected.begin());
  // Children in increasing distance: the child at m completes its own subtree in
  // the rounds before it sends, exactly as we do before sending to our parent.
  for (int mask = 1; mask < size; mask <<= 1) {
    if (vrank & mask) {
      const int parent = (vrank - mask + root) % size;
      DTL_MPI_CHECK(MPI_Send(collected.data(), static_cast<int>(subtree * block), type, parent, tag, comm));
      break;
    }
    const int child = vrank + mask;
    if (child < size) {
      const int blocks = std::min(mask, size - child);
      DTL_MPI_CHECK(MPI_Recv(collected.data() + mask * block, static_cast<int>(blocks * block), type,
                             (child + root) % size, tag, comm, MPI_STATUS_IGNORE));
    }
  }
  if (vrank == 0 && root != 0) {
    // Un-rotate: vranks 0 .. P-root-1 are ranks root .. P-1, the rest are 0 .. root-1.
    const std::size_t head = (size - root) * block;
    std::copy_n(staging.begin(), head, recv_buf.begin() + static_cast<std::ptrdiff_t>(root * block));
    std::copy(staging.begin() + static_cast<std::ptrdiff_t>(head), staging.end(), recv_buf.begin());
  }
  // END SOLUTION
}

// The element types of the lab (dtl::Element): one instance of each function per type.
template void scatter<float>(MPI_Comm, std::span<const float>, std::span<float>, int, int);
template void scatter<double>(MPI_Comm, std::span<const double>, std::span<double>, int, int);
template void scatter<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, int, int);
template void gather<float>(MPI_Comm, std::span<const float>, std::span<float>, int, int);
template void gather<double>(MPI_Comm, std::span<const double>, std::span<double>, int, int);
template void gather<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, int, int);

}  // namespace dtl::lab02
