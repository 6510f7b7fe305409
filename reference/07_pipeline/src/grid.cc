// Lab 07, task E: pipelines side by side, data parallel across them.
//
// What this file teaches: the two kinds of parallelism compose through
// sub-communicators. A rank talks point-to-point to its pipeline neighbours and
// allreduces with the ranks that hold the same stage in the other pipelines.
// See Note [Pipeline x data parallel] in lab07/pipeline.h.
//
// W = 6, P = 3 (D = 2):
//
//     world rank    0  1  2  3  4  5
//     replica       0  0  0  1  1  1      pipeline communicators {0,1,2}, {3,4,5}
//     stage         0  1  2  0  1  2      data communicators {0,3}, {1,4}, {2,5}
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/comm/mpi.h"
#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

Grid make_grid(MPI_Comm world, int stages) {
  const auto [rank, size] = rank_and_size(world);
  DTL_REQUIRE_ARG(stages >= 1 && size % stages == 0, "make_grid", "stages",
                  "is " + std::to_string(stages) + "; it must be >= 1 and divide the " + std::to_string(size) +
                      " ranks (D pipelines of P stages)");
  Grid grid;
  // BEGIN SOLUTION(make_grid)
  // | Fill `grid` (returned below) as lab07/pipeline.h defines a Grid: `pipeline` holds the P
  // | ranks of this rank's replica with rank == stage, `data` the D ranks that hold this
  // | stage with rank == replica, and stage, replica, stages, replicas set. Both Comms own
  // | their communicators and nothing else is left allocated (Note [Pipeline x data
  // | parallel], handout Task E). The argument checks are written above.
  grid.stages = stages;
  grid.replicas = size / stages;
  grid.stage = rank % stages;
  grid.replica = rank / stages;
  MPI_Comm pipeline = MPI_COMM_NULL, data = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(world, grid.replica, grid.stage, &pipeline));
  DTL_MPI_CHECK(MPI_Comm_split(world, grid.stage, grid.replica, &data));
  grid.pipeline = Comm(pipeline);
  grid.data = Comm(data);
  DTL_MPI_CHECK(MPI_Comm_free(&pipeline));
  DTL_MPI_CHECK(MPI_Comm_free(&data));
  // END SOLUTION
  return grid;
}

void allreduce_stage_gradients(Communicator& data, nn::Model& model) {
  // BEGIN SOLUTION(allreduce_stage_gradients)
  // | On return every gradient of this stage's model holds the average (ReduceOp::kAvg) over
  // | the data-parallel group `data`: one allreduce of the flat gradient buffer when the
  // | gradients were flattened, else one per parameter, all in flight together and all
  // | finished on return (handout Task E).
  if (data.world_size() == 1) return;
  std::vector<Work> pending;
  const nn::Tensor& flat = model.flat_grads();
  if (flat.defined()) {
    pending.push_back(data.allreduce(flat.data<float>(), static_cast<std::size_t>(flat.numel()), DType::kF32,
                                     ReduceOp::kAvg));
  } else {
    for (nn::Parameter* p : model.parameters()) {
      pending.push_back(data.allreduce(p->grad.data<float>(), static_cast<std::size_t>(p->grad.numel()),
                                       DType::kF32, ReduceOp::kAvg));
    }
  }
  for (Work& w : pending) w.wait();
  // END SOLUTION
}

}  // namespace dtl::lab07
