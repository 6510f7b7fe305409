// Lab 08, tasks D and E: gradients across groups; tensor parallel x data parallel.
//
// What this file teaches: tensor parallelism composes with data parallelism
// through sub-communicators, and every parameter's gradient is reduced over
// exactly the ranks that hold a copy of the same numbers (See Note [TP x DP]):
//
//     a slice of a split weight      copies: the same slice in the other replicas   -> data group, average
//     a replicated parameter, SP     partial sums over the rows of the tensor group -> tensor group, sum
//
// W = 4, T = 2 (D = 2):
//
//     world rank        0  1  2  3
//     replica           0  0  1  1      tensor groups {0,1}, {2,3} (consecutive: one node each)
//     tensor rank       0  1  0  1      data groups {0,2}, {1,3}
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/comm/mpi.h"
#include "lab08/tensor_parallel.h"

namespace dtl::lab08 {

Grid make_grid(MPI_Comm world, int tp_size) {
  const auto [rank, size] = rank_and_size(world);
  DTL_REQUIRE_ARG(tp_size >= 1 && size % tp_size == 0, "make_grid", "tp_size",
                  "is " + std::to_string(tp_size) + "; it must be >= 1 and divide the " + std::to_string(size) +
                      " ranks (D replicas of T tensor-parallel ranks)");
  Grid grid;
  // TODO(student): Fill `grid` (returned below) as lab08/tensor_parallel.h defines a Grid: `tensor` holds
  //   the T ranks of this rank's replica with rank == tp_rank, `data` the D ranks with this
  //   tp_rank with rank == replica, and the numbers set. Both Comms own their communicators
  //   and nothing else is left allocated (Note [TP x DP], handout Task E). The argument
  //   checks are written above.
  throw dtl::NotImplemented("make_grid");
  return grid;
}

void allreduce_data_parallel_gradients(Communicator& data, nn::Model& model) {
  // TODO(student): On return every parameter gradient of this rank's model holds the average
  //   (ReduceOp::kAvg) over `data`, in its own dtype: all allreduces in flight together and
  //   finished on return; nothing to do for a group of one (handout Task E).
  throw dtl::NotImplemented("allreduce_data_parallel_gradients");
}

void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated) {
  // TODO(student): With sequence parallelism each rank's gradient of a replicated parameter covers its own
  //   rows only. On return the gradient of every parameter in `replicated` holds the full
  //   gradient, the sum (not the average) over the tensor group `tp`, as the header says. All
  //   in flight together, finished on return; nothing to do for a group of one (Note
  //   [Sequence parallelism], handout Task D).
  throw dtl::NotImplemented("allreduce_sequence_parallel_gradients");
}

}  // namespace dtl::lab08
