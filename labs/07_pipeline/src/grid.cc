// Lab 07, task E: pipelines side by side, data parallel across them.
//
// What this file teaches: the two kinds of parallelism compose through
// sub-communicators. A rank talks point-to-point to its pipeline neighbours and
// allreduces with the ranks that hold the same stage in the other pipelines.
// See Note [Pipeline x data parallel] in lab07/pipeline.h. The same grid serves
// lab 08, with a tensor-parallel group as the model group (lab07/grid.h).
//
// W = 6, P = 3 (D = 2):
//
//     world rank    0  1  2  3  4  5
//     replica       0  0  0  1  1  1      model (pipeline) groups {0,1,2}, {3,4,5}
//     model rank    0  1  2  0  1  2      data groups {0,3}, {1,4}, {2,5}
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab07/grid.h"

namespace dtl::lab07 {

Grid make_grid(MPI_Comm world, int model_size) {
  const auto [rank, size] = rank_and_size(world);
  DTL_REQUIRE_ARG(model_size >= 1 && size % model_size == 0, "make_grid", "model_size",
                  "is " + std::to_string(model_size) + "; it must be >= 1 and divide the " + std::to_string(size) +
                      " ranks (D replicas of a model split over model_size ranks)");
  Grid grid;
  // TODO(student): Fill `grid` (returned below) as lab07/grid.h defines a Grid: `model_group` holds the
  //   G ranks of this rank's replica with rank == model_rank, `data_group` the D ranks that
  //   hold this model rank with rank == replica, and model_rank, replica, model_size,
  //   replicas set. Both Comms own their communicators and nothing else is left allocated
  //   (Note [Pipeline x data parallel], handout Task E). The argument checks are written
  //   above.
  throw dtl::NotImplemented("make_grid");
  return grid;
}

void allreduce_data_parallel_gradients(Communicator& data, nn::Model& model) {
  // TODO(student): On return every gradient of this rank's model holds the average (ReduceOp::kAvg) over
  //   the data-parallel group `data`: one allreduce of the flat gradient buffer when the
  //   gradients were flattened, else one per parameter in its own dtype, all in flight
  //   together and all finished on return; nothing to do for a group of one (handout Task
  //   E).
  throw dtl::NotImplemented("allreduce_data_parallel_gradients");
}

}  // namespace dtl::lab07
