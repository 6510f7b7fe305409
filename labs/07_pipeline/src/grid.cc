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
  // TODO(student): stage = rank % P, replica = rank / P. MPI_Comm_split(world, color, key, &c) twice:
  //   the pipeline with color = replica and key = stage (so rank in it = stage), the
  //   data group with color = stage and key = replica. A Comm duplicates what it is
  //   given, so wrap each split communicator in a Comm and MPI_Comm_free the split one.
  throw dtl::NotImplemented("make_grid");
  return grid;
}

void allreduce_stage_gradients(Communicator& data, nn::Model& model) {
  // TODO(student): World of one: nothing to do. Otherwise, if model.flat_grads() is defined, one
  //   allreduce(ReduceOp::kAvg) over it; else one per parameter's grad (f32). Issue
  //   every allreduce first, keep the Work handles, then wait for all of them.
  throw dtl::NotImplemented("allreduce_stage_gradients");
}

}  // namespace dtl::lab07
