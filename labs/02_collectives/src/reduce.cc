// Lab 02, task C: reduce along a binomial tree.
//
// What this file teaches: a reduction is a gather that combines on the way.
// Instead of forwarding its children's data, each rank adds (or takes the max or
// min of) what its children send into its own vector and forwards one vector of
// n bytes. With gamma the time to combine one byte:
//
//   linear (root receives P - 1 vectors)   (P-1) * (alpha + n * beta + n * gamma)
//   binomial tree                          ceil(log2 P) * (alpha + n * beta + n * gamma)
//
//   P = 8, root 0 (vranks), the broadcast tree upside down:
//     round 1:  1 ─▶ 0   3 ─▶ 2   5 ─▶ 4   7 ─▶ 6
//     round 2:  2 ───▶ 0          6 ───▶ 4
//     round 3:  4 ───────▶ 0
//
// Every non-root sends exactly one message; the root receives ceil(log2 P). The
// tree is not bandwidth-optimal for large n (every round moves all n bytes):
// reduce-scatter + gather (Rabenseifner) moves about 2n bytes in total, the same
// trick as the scatter + allgather broadcast; lab 03 builds its ring allreduce
// on that idea.
//
// Order of the operations. The tree combines in an order that depends on P and
// the root, not rank 0 + rank 1 + ... This is fine for the three operators here,
// which are commutative and associative — for integers, and for floating point
// max and min. A floating-point sum is not associative (rounding), so results
// can differ from MPI_Reduce's in the last bits; the tests use integer-valued
// data, whose sums are exact in any order, to compare bit for bit.
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

// TODO(student): A helper (file scope) that combines `in` into `acc` element by element with `op` (sum,
//   max or min) for every Element type; reduce() below uses it (handout Task C).

template <Element T>
void reduce(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, ReduceOp op, int root, int tag) {
  const auto [rank, size] = rank_and_size(comm);
  require_op("reduce", op, {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin});
  require_rank("reduce", "root", root, size);
  require_tag("reduce", tag);
  DTL_REQUIRE_ARG(recv_buf.size() == send_buf.size() || (rank != root && recv_buf.empty()), "reduce", "recv_buf",
                  "has " + std::to_string(recv_buf.size()) + " elements; send_buf has " +
                      std::to_string(send_buf.size()) + " (on a rank other than the root it may also be empty)");
  const int count = to_mpi_count(send_buf.size(), "reduce", "send_buf");
  if (count == 0) return;
  const MPI_Datatype type = mpi_datatype<T>();

  // TODO(student): On the root recv_buf ends as the element-wise `op` of every rank's send_buf; send_buf
  //   is never written, and recv_buf is not touched on other ranks. The binomial gather tree
  //   for any root: non-roots send exactly one message of the whole vector, the root sends
  //   none and receives exactly L, nobody receives more than L, all on `tag` (handout Task C,
  //   section (e)). With one rank: a copy.
  throw dtl::NotImplemented("reduce");
}

// The element types of the lab (dtl::Element): one instance per type.
template void reduce<float>(MPI_Comm, std::span<const float>, std::span<float>, ReduceOp, int, int);
template void reduce<double>(MPI_Comm, std::span<const double>, std::span<double>, ReduceOp, int, int);
template void reduce<std::int32_t>(MPI_Comm, std::span<const std::int32_t>, std::span<std::int32_t>, ReduceOp, int,
                                   int);

}  // namespace dtl::lab02
