// Lab 08, task F: a row-parallel Linear layer whose allreduce overlaps its GEMM.
//
// What this file teaches: a collective that depends on a computation need not
// wait for all of it. Each row of y is reduced on its own, so the GEMM is cut into
// row chunks and each chunk's allreduce goes onto the link the moment its rows
// exist, while the cores multiply the next chunk (See Note [Overlapping the
// row-parallel allreduce] in lab08/overlapped_linear.h):
//
//     GEMM   [ rows 0 ][ rows 1 ][ rows 2 ]
//     link             [ AR 0 ]  [ AR 1 ]  [ AR 2 ]      only the last is exposed
//
// The constructor, the backward (no communication, as RowParallelLinear's) and the
// plumbing are given (given/overlapped_layer.cc); the forward is the task.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "harness/nn/gemm.h"
#include "harness/nn/layer_util.h"
#include "lab08/overlapped_linear.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // ensure(), require_input(), dispatch_float()

const nn::Tensor& OverlappedRowParallelLinear::forward(const nn::Tensor& x) {
  detail::require_input(x, weight_.value.dtype(), in_, name_, "x");
  Cache& cache = caches_.at(slot_);
  cache.x = x;  // a handle: backward's dW needs it
  detail::ensure(cache.y, output_shape(x.shape()), x.dtype());
  // TODO(student): Return y = the sum over the group of x_r W_rᵀ, plus the bias once, in cache.y (made
  //   above), as RowParallelLinear's forward. The N rows of x (every dimension but the last)
  //   are cut into k chunks of consecutive rows, in row order, their sizes differing by at
  //   most one row, none empty (k is chunks_, or N when N is smaller); each chunk's rows of
  //   the product are computed in place in cache.y and their allreduce is issued before the
  //   next chunk's GEMM begins; all are waited for before the bias is added and forward
  //   returns (Note [Overlapping the row-parallel allreduce], handout Task F; the tests
  //   record the chunks and what cache.y holds at each issue).
  throw dtl::NotImplemented("OverlappedRowParallelLinear::forward");
}

}  // namespace dtl::lab08
