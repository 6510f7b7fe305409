// Lab 08, task D: the gradients of sequence parallelism, across the tensor group.
//
// What this file teaches: every parameter's gradient is reduced over exactly the
// ranks that hold a copy of the same numbers (See Note [TP x DP]). Lab 07's grid
// (lab07/grid.h, your make_grid() and allreduce_data_parallel_gradients()) gives
// the groups and the first line of this table; the second line is yours here:
//
//     a slice of a split weight      copies: the same slice in the other replicas   -> data group, average
//     a replicated parameter, SP     partial sums over the rows of the tensor group -> tensor group, sum
//
// W = 4, T = 2 (D = 2):
//
//     world rank        0  1  2  3
//     replica           0  0  1  1      tensor groups {0,1}, {2,3} (consecutive: one node each)
//     tensor rank       0  1  0  1      data groups {0,2}, {1,3}
//     (make_grid(world, T = 2): model_group = the tensor group, model_rank = the tensor rank)
#include <string>

#include "lab08/tensor_parallel.h"

namespace dtl::lab08 {

void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated) {
  // TODO(student): With sequence parallelism each rank's gradient of a replicated parameter covers its own
  //   rows only. On return the gradient of every parameter in `replicated` holds the full
  //   gradient, the sum (not the average) over the tensor group `tp`, as the header says, with
  //   one collective for them all (they are small, and each collective costs a latency: Note
  //   [One collective for the small gradients]); none for a group of one or an empty list.
  //   Gradients of different dtypes: dtl::InvalidArgument naming "replicated" and the rank,
  //   before any collective (handout Task D).
  throw dtl::NotImplemented("allreduce_sequence_parallel_gradients");
}

}  // namespace dtl::lab08
