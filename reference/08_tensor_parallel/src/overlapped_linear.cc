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
    // BEGIN SOLUTION(OverlappedRowParallelLinear::forward_sp)
    // | Task F2, sequence parallelism: x is (B, S, in/T) for the whole sequences; return this
    // | rank's tokens of every sequence of y, (B, S/T, out) in cache.y (made above), summed
    // | over the group, plus the bias, as RowParallelLinear's sequence-parallel forward. This
    // | rank's n rows of y are cut into k' chunks of consecutive rows, as the class's comment
    // | in lab08/overlapped_linear.h fixes (k' is chunks_, or n when n is smaller; every rank
    // | cuts the same way, so the tests know each chunk); chunk c is one reduce-scatter, issued as soon
    // | as its blocks of the product are computed and before the next chunk's GEMMs begin,
    // | sending from its rows of one staging buffer (ensure_staging()) and receiving in place
    // | into its rows of cache.y; the rows of x a chunk multiplies are read only once the chunk
    // | before it is issued; all are waited for before the bias is added, once (the layout:
    // | the class's comment in lab08/overlapped_linear.h;
    // | Note [Overlapping the sequence-parallel reduce-scatter], handout Task F2; the tests
    // | record the chunks, what the staging buffer holds at each issue and when each is waited for).
    const int T = tp_.world_size();
    const SequenceShard mine = sequence_shard(x.shape(), T, tp_.rank(), "OverlappedRowParallelLinear.forward", "x");
    const std::int64_t length = mine.length, s = mine.tokens.size;  // S, and S/T tokens per rank
    const std::int64_t rows = mine.sequences * s;                     // n: this rank's rows of y
    const std::int64_t k = std::min<std::int64_t>(chunks_, rows);
    ensure_staging(cache.staging, {T * rows, out_}, x.dtype());
    std::vector<Work> pending;
    pending.reserve(static_cast<std::size_t>(k));
    detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
      using V = decltype(zero);
      for (std::int64_t c = 0; c < k; ++c) {
        const std::int64_t begin = c * rows / k, end = (c + 1) * rows / k, size = end - begin;
        V* send = cache.staging.data<V>() + T * begin * out_;  // this chunk's T blocks, in rank order
        for (int q = 0; q < T; ++q) {
          // Block q: the product rows that become rank q's rows [begin, end) of y. Row i of
          // rank q's y is token q s + i % s of sequence i / s: runs that break at a sequence's end.
          for (std::int64_t i = begin; i < end;) {
            const std::int64_t b = i / s, run = std::min(end, (b + 1) * s) - i;
            nn::gemm(false, true, run, out_, in_, V{1}, x.data<V>() + (b * length + q * s + i % s) * in_, in_,
                     weight_.value.data<V>(), in_, V{0}, send + (q * size + i - begin) * out_, out_);
            i += run;
          }
        }
        // Every rank's rows [begin, end) summed, straight into this rank's rows of y, while the next chunk is multiplied.
        pending.push_back(tp_.reduce_scatter(send, cache.y.data<V>() + begin * out_,
                                             static_cast<std::size_t>(size * out_), x.dtype(), ReduceOp::kSum));
      }
    });
    for (Work& work : pending) work.wait();
    if (has_bias_) add_bias(cache.y, bias_.value);
    return cache.y;
    // END SOLUTION
  }
  // BEGIN SOLUTION(OverlappedRowParallelLinear::forward)
  // | Return y = the sum over the group of x_r W_rᵀ, plus the bias once, in cache.y (made
  // | above), as RowParallelLinear's forward. The N rows of x (every dimension but the last)
  // | are cut into k chunks of consecutive rows, in row order, their sizes differing by at
  // | most one row, none empty (k is chunks_, or N when N is smaller); each chunk's rows of
  // | the product are computed in place in cache.y and their allreduce is issued before the
  // | next chunk's GEMM begins (and not waited for, nor polled until done, before the next
  // | is issued), and a chunk's rows of x are read only once the chunk before it is issued;
  // | all are waited for before the bias is added and forward returns (Note
  // | [Overlapping the row-parallel allreduce], handout Task F; the tests record the chunks
  // | and what cache.y holds at each issue, and change the later rows of x after it).
  const std::int64_t rows = x.numel() / in_;
  const std::int64_t k = std::min<std::int64_t>(chunks_, rows);  // no empty chunk: k > N gives N chunks of one row
  std::vector<Work> pending;
  pending.reserve(static_cast<std::size_t>(k));
  detail::dispatch_float(x.dtype(), "OverlappedRowParallelLinear::forward", [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t c = 0; c < k; ++c) {
      // Rows [c N / k, (c + 1) N / k): sizes differ by at most one row.
      const std::int64_t begin = c * rows / k, end = (c + 1) * rows / k;
      T* y_chunk = cache.y.data<T>() + begin * out_;
      // This chunk's rows of x_r W_r^T, straight into its rows of y ...
      nn::gemm(false, true, end - begin, out_, in_, T{1}, x.data<T>() + begin * in_, in_, weight_.value.data<T>(),
               in_, T{0}, y_chunk, out_);
      // ... and their sum over the group goes onto the link while the next chunk is multiplied.
      pending.push_back(tp_.allreduce(y_chunk, static_cast<std::size_t>((end - begin) * out_), x.dtype(),
                                      ReduceOp::kSum));
    }
  });
  for (Work& work : pending) work.wait();  // only the last chunk's allreduce should still be running
  if (has_bias_) add_bias(cache.y, bias_.value);
  return cache.y;
  // END SOLUTION
}

}  // namespace dtl::lab08
