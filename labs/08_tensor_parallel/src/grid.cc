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
  // TODO(student): tp_rank = rank % T, replica = rank / T. MPI_Comm_split twice: the tensor group
  //   with color = replica and key = tp_rank, the data group with color = tp_rank and
  //   key = replica. A Comm duplicates what it is given: wrap each split communicator
  //   in a Comm, then MPI_Comm_free the split one.
  throw dtl::NotImplemented("make_grid");
  return grid;
}

void allreduce_data_parallel_gradients(Communicator& data, nn::Model& model) {
  // TODO(student): A group of one: nothing to do. Otherwise one allreduce (ReduceOp::kAvg) per
  //   parameter's grad ( of its dtype), all issued first, then all waited for.
  throw dtl::NotImplemented("allreduce_data_parallel_gradients");
}

void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated) {
  // TODO(student): Each rank's gradient covers its own rows only: the full gradient is the sum
  //   (ReduceOp::kSum, not the average) over the tensor group. One allreduce per
  //   parameter, all issued, then all waited for. Nothing to do for a group of one.
  throw dtl::NotImplemented("allreduce_sequence_parallel_gradients");
}

}  // namespace dtl::lab08
