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
  // BEGIN SOLUTION(make_grid)
  // | Fill `grid` (returned below) as lab08/tensor_parallel.h defines a Grid: `tensor` holds
  // | the T ranks of this rank's replica with rank == tp_rank, `data` the D ranks with this
  // | tp_rank with rank == replica, and the numbers set. Both Comms own their communicators
  // | and nothing else is left allocated (Note [TP x DP], handout Task E). The argument
  // | checks are written above.
  grid.tp_size = tp_size;
  grid.replicas = size / tp_size;
  grid.tp_rank = rank % tp_size;
  grid.replica = rank / tp_size;
  MPI_Comm tensor = MPI_COMM_NULL, data = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(world, grid.replica, grid.tp_rank, &tensor));
  DTL_MPI_CHECK(MPI_Comm_split(world, grid.tp_rank, grid.replica, &data));
  grid.tensor = Comm(tensor);
  grid.data = Comm(data);
  DTL_MPI_CHECK(MPI_Comm_free(&tensor));
  DTL_MPI_CHECK(MPI_Comm_free(&data));
  // END SOLUTION
  return grid;
}

void allreduce_data_parallel_gradients(Communicator& data, nn::Model& model) {
  // BEGIN SOLUTION(allreduce_data_parallel_gradients)
  // | On return every parameter gradient of this rank's model holds the average
  // | (ReduceOp::kAvg) over `data`, in its own dtype: all allreduces in flight together and
  // | finished on return; nothing to do for a group of one (handout Task E).
  if (data.world_size() == 1) return;
  std::vector<Work> pending;
  for (nn::Parameter* p : model.parameters()) {
    pending.push_back(data.allreduce(p->grad.raw(), static_cast<std::size_t>(p->grad.numel()),
                                     p->grad.dtype(), ReduceOp::kAvg));
  }
  for (Work& w : pending) w.wait();
  // END SOLUTION
}

void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated) {
  // BEGIN SOLUTION(allreduce_sequence_parallel_gradients)
  // | With sequence parallelism each rank's gradient of a replicated parameter covers its own
  // | rows only. On return the gradient of every parameter in `replicated` holds the full
  // | gradient, the sum (not the average) over the tensor group `tp`, as the header says. All
  // | in flight together, finished on return; nothing to do for a group of one (Note
  // | [Sequence parallelism], handout Task D).
  if (tp.world_size() == 1) return;
  std::vector<Work> pending;
  for (nn::Parameter* p : replicated) {
    pending.push_back(tp.allreduce(p->grad.raw(), static_cast<std::size_t>(p->grad.numel()),
                                   p->grad.dtype(), ReduceOp::kSum));
  }
  for (Work& w : pending) w.wait();
  // END SOLUTION
}

}  // namespace dtl::lab08
