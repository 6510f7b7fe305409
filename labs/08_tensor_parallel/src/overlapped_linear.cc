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
// Task F2 does the same for the reduce-scatter that leaves a sequence-parallel
// pair: each chunk a reduce-scatter of its own, every rank's block of it computed
// before it is issued (See Note [Overlapping the sequence-parallel reduce-scatter]).
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
  if (sequence_parallel_) require_sequence(x, tp_, name_, "x");  // (..., S, in/T), T divides S
  Cache& cache = caches_.at(slot_);
  cache.x = x;  // a handle: backward's dW needs it
  detail::ensure(cache.y, output_shape(x.shape()), x.dtype());
  if (sequence_parallel_) {
    // TODO(student): Task F2, sequence parallelism: x is (B, S, in/T) for the whole sequences; return this
    //   rank's tokens of every sequence of y, (B, S/T, out) in cache.y (made above), summed
    //   over the group, plus the bias, as RowParallelLinear's sequence-parallel forward. This
    //   rank's n rows of y are cut into k' chunks of consecutive rows, as the class's comment
    //   in lab08/overlapped_linear.h fixes (k' is chunks_, or n when n is smaller; every rank
    //   cuts the same way, so the tests know each chunk); chunk c is one reduce-scatter, issued as soon
    //   as its blocks of the product are computed and before the next chunk's GEMMs begin,
    //   sending from its rows of one staging buffer (ensure_staging()) and receiving in place
    //   into its rows of cache.y; the rows of x a chunk multiplies are read only once the chunk
    //   before it is issued; all are waited for before the bias is added, once (the layout:
    //   the class's comment in lab08/overlapped_linear.h;
    //   Note [Overlapping the sequence-parallel reduce-scatter], handout Task F2; the tests
    //   record the chunks, what the staging buffer holds at each issue and when each is waited for).
    throw dtl::NotImplemented("OverlappedRowParallelLinear::forward_sp");
  }
  // TODO(student): Return y = the sum over the group of x_r W_rᵀ, plus the bias once, in cache.y (made
  //   above), as RowParallelLinear's forward. The N rows of x (every dimension but the last)
  //   are cut into k chunks of consecutive rows, in row order, their sizes differing by at
  //   most one row, none empty (k is chunks_, or N when N is smaller); each chunk's rows of
  //   the product are computed in place in cache.y and their allreduce is issued before the
  //   next chunk's GEMM begins (and not waited for, nor polled until done, before the next
  //   is issued), and a chunk's rows of x are read only once the chunk before it is issued;
  //   all are waited for before the bias is added and forward returns (Note
  //   [Overlapping the row-parallel allreduce], handout Task F; the tests record the chunks
  //   and what cache.y holds at each issue, and change the later rows of x after it).
  throw dtl::NotImplemented("OverlappedRowParallelLinear::forward");
}

}  // namespace dtl::lab08
