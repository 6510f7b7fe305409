// Lab 08, tasks A and D: the column- and row-parallel Linear layers.
//
// What this file teaches: where the communication of tensor parallelism goes.
// Each layer keeps its slice of the full weight in an nn::Linear of its own
// (the GEMMs are the harness's) and adds exactly one collective in exactly one
// direction: See Note [f and g] in lab08/parallel_linear.h.
//
//                         forward                 backward
//     ColumnParallel      -                       allreduce dx       (f)
//     RowParallel         allreduce y             -                  (g)
//     ... with sequence parallelism (See Note [Sequence parallelism]):
//     ColumnParallel      all-gather x's tokens   reduce-scatter dx
//     RowParallel         reduce-scatter y        all-gather dy's tokens
//
// With sequence parallelism a rank holds its S/T tokens of every sequence
// (sequence_shard()), while the collectives deal in blocks in rank order: the
// all-gather's block q is rank q's tokens of all B sequences, and block q of the
// reduce-scatter's input is what rank q gets. The activations between the pairs
// are whole sequences in (B, S, C) order, so the blocks are reordered on the way in
// and out (unless B = 1 or T = 1, where rank order already is sequence order).
#include <string>
#include <utility>

#include "harness/nn/layer_util.h"
#include "lab08/parallel_linear.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // ensure(), notify(), require_grad(), dispatch_float()

// BEGIN SOLUTION
// | Helpers of your own for the sequence-parallel blocks, if you want them: the
// | collectives see blocks in rank order, the layers whole sequences in (B, S, C)
// | order (Note [Sequence parallelism]).
namespace {

// Whether a tensor split along its sequence, as `whole` is, has every rank's tokens
// as one contiguous block in rank order (one sequence, or a group of one).
bool rank_order_is_sequence_order(const nn::Tensor& whole, int parts) {
  return parts == 1 || sequence_shard(whole.shape(), parts, 0, "sequence parallelism", "whole").sequences == 1;
}

// Between `staging` (T blocks in rank order; block q holds rank q's tokens of every
// sequence) and `whole` (B, S, C) in sequence order, in the direction `to_whole` says.
void reorder(const nn::Tensor& staging, const nn::Tensor& whole, int parts, bool to_whole) {
  for (int q = 0; q < parts; ++q) {
    const SequenceShard s = sequence_shard(whole.shape(), parts, q, "sequence parallelism", "whole");
    const std::int64_t piece = s.tokens.size * s.token;  // rank q's tokens of one sequence
    for (std::int64_t b = 0; b < s.sequences; ++b) {
      const nn::Tensor block = staging.view((q * s.sequences + b) * piece, {piece});
      const nn::Tensor tokens = whole.view((b * s.length + s.tokens.begin) * s.token, {piece});
      if (to_whole) {
        tokens.copy_from(block);
      } else {
        block.copy_from(tokens);
      }
    }
  }
}

// whole (B, S, C) = every rank's `mine` (B, S/T, C), in sequence order: one all-gather.
void gather_tokens(Communicator& tp, const nn::Tensor& mine, const nn::Tensor& whole, nn::Tensor& staging) {
  const auto count = static_cast<std::size_t>(mine.numel());
  if (rank_order_is_sequence_order(whole, tp.world_size())) {
    tp.allgather(mine.raw(), whole.raw(), count, mine.dtype()).wait();
    return;
  }
  ensure_staging(staging, {whole.numel()}, whole.dtype());
  tp.allgather(mine.raw(), staging.raw(), count, mine.dtype()).wait();
  reorder(staging, whole, tp.world_size(), /*to_whole=*/true);
}

// mine (B, S/T, C) = this rank's tokens of the sum over the group of `whole` (B, S, C):
// one reduce-scatter.
void scatter_tokens(Communicator& tp, const nn::Tensor& whole, const nn::Tensor& mine, nn::Tensor& staging) {
  const auto count = static_cast<std::size_t>(mine.numel());
  if (rank_order_is_sequence_order(whole, tp.world_size())) {
    tp.reduce_scatter(whole.raw(), mine.raw(), count, whole.dtype(), ReduceOp::kSum).wait();
    return;
  }
  ensure_staging(staging, {whole.numel()}, whole.dtype());
  reorder(staging, whole, tp.world_size(), /*to_whole=*/false);
  tp.reduce_scatter(staging.raw(), mine.raw(), count, whole.dtype(), ReduceOp::kSum).wait();
}

// `shape` with its sequence (the second-to-last dimension) multiplied by
// `times` or divided by `over`.
nn::Shape with_sequence(const nn::Shape& shape, std::int64_t times, std::int64_t over) {
  nn::Shape out = shape;
  out[out.size() - 2] = out[out.size() - 2] * times / over;
  return out;
}

}  // namespace
// END SOLUTION

// ---------------------------------------------------------------------------
// ColumnParallelLinear
// ---------------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(nn::Linear& full, Communicator& tp, ParallelOptions options)
    : nn::Layer(full.name()),
      tp_(tp),
      options_(options),
      in_(full.weight().value.dim(1)),
      out_(full.weight().value.dim(0)),
      local_(full.name(), in_, column_local_out(full, tp, options), full.weight().value.dtype(), unused_rng(), 0.0,
             full.bias().value.defined()) {
  // BEGIN SOLUTION(ColumnParallelLinear)
  // | Fill local_ (out/T, in) and its bias with this rank's slice of the full layer's rows,
  // | as Note [Tensor parallelism] cuts them, and with options_.groups > 1 as Note [Splitting
  // | a fused projection] cuts a fused projection (the tests compare with slices of the full
  // | model; handout Task A).
  const std::int64_t per_group = out_ / options_.groups;
  const std::int64_t slice = per_group / tp_.world_size();
  for (int g = 0; g < options_.groups; ++g) {
    const std::int64_t from = g * per_group + tp_.rank() * slice;  // first row in the full layer
    const std::int64_t to = g * slice;                             // first row here
    local_.weight().value.view(to * in_, {slice, in_}).copy_from(full.weight().value.view(from * in_, {slice, in_}));
    if (full.bias().value.defined()) {
      local_.bias().value.view(to, {slice}).copy_from(full.bias().value.view(from, {slice}));
    }
  }
  // END SOLUTION
}

const nn::Tensor& ColumnParallelLinear::forward(const nn::Tensor& x) {
  if (!options_.sequence_parallel) {
    // BEGIN SOLUTION(ColumnParallelLinear::forward)
    // | Return this rank's slice of y's output features for the whole input x: f's forward
    // | (Note [f and g]); the communication allowed is f's and no more (Comm.* counts the
    // | operations).
    return local_.forward(x);
    // END SOLUTION
  }
  detail::require_input(x, local_.weight().value.dtype(), in_, name_, "x");
  DTL_REQUIRE_ARG(x.ndim() >= 2, (name_ + ".forward").c_str(), "x",
                  "has shape " + nn::to_string(x.shape()) + "; with sequence parallelism it is (..., S/T, in)");
  Cache& cache = caches_.at(slot_);
  // BEGIN SOLUTION(ColumnParallelLinear::forward_sp)
  // | Sequence parallelism (Note [Sequence parallelism], handout Task D): x holds this rank's
  // | tokens of every sequence, (B, S/T, in); return this rank's output features for the
  // | whole sequences, (B, S, out/T) in sequence order, with one all-gather; keep the whole
  // | input in cache.gathered (made with detail::ensure()), a buffer in rank order in
  // | cache.staging (ensure_staging()).
  detail::ensure(cache.gathered, with_sequence(x.shape(), tp_.world_size(), 1), x.dtype());
  gather_tokens(tp_, x, cache.gathered, cache.staging);
  return local_.forward(cache.gathered);
  // END SOLUTION
}

const nn::Tensor& ColumnParallelLinear::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  if (!options_.sequence_parallel) {
    // BEGIN SOLUTION(ColumnParallelLinear::backward)
    // | Accumulate this rank's dW and db and return the whole dL/dx, identical on every rank:
    // | f's backward (Note [f and g]); one collective, waited for before returning.
    const nn::Tensor& dx = local_.backward(dy, grad_ready);
    tp_.allreduce(dx.raw(), static_cast<std::size_t>(dx.numel()), dx.dtype(), ReduceOp::kSum).wait();
    return dx;
    // END SOLUTION
  }
  Cache& cache = caches_.at(slot_);
  // BEGIN SOLUTION(ColumnParallelLinear::backward_sp)
  // | Sequence parallelism: accumulate dW and db and return dL/dx for this rank's tokens of
  // | every sequence only, (B, S/T, in) in cache.dx, complete (summed over every rank's
  // | contribution), with one collective (Note [Sequence parallelism], handout Task D).
  const nn::Tensor& dx_all = local_.backward(dy, grad_ready);
  detail::ensure(cache.dx, with_sequence(dx_all.shape(), 1, tp_.world_size()), dx_all.dtype());
  scatter_tokens(tp_, dx_all, cache.dx, cache.staging);
  return cache.dx;
  // END SOLUTION
}

// ---------------------------------------------------------------------------
// RowParallelLinear
// ---------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(nn::Linear& full, Communicator& tp, ParallelOptions options)
    : nn::Layer(full.name()),
      tp_(tp),
      options_(options),
      in_(full.weight().value.dim(1)),
      out_(full.weight().value.dim(0)),
      has_bias_(full.bias().value.defined()),
      local_(full.name(), row_local_in(full, tp, options), out_, full.weight().value.dtype(), unused_rng(), 0.0,
             /*bias=*/false) {
  if (has_bias_) bias_ = detail::make_parameter(name_ + ".bias", {out_}, full.bias().value.dtype());
  // BEGIN SOLUTION(RowParallelLinear)
  // | Fill local_ (out, in/T) with this rank's slice of the full layer's input columns as
  // | Note [Tensor parallelism] cuts them, and bias_ with the bias as Note [f and g] says a
  // | row-parallel layer keeps it (handout Task A).
  const std::int64_t slice = in_ / tp_.world_size();
  const std::int64_t begin = tp_.rank() * slice;
  for (std::int64_t o = 0; o < out_; ++o) {
    local_.weight().value.view(o * slice, {slice}).copy_from(full.weight().value.view(o * in_ + begin, {slice}));
  }
  if (has_bias_) bias_.value.copy_from(full.bias().value);
  // END SOLUTION
}

const nn::Tensor& RowParallelLinear::forward(const nn::Tensor& x) {
  Cache& cache = caches_.at(slot_);
  if (!options_.sequence_parallel) {
    // BEGIN SOLUTION(RowParallelLinear::forward)
    // | x is this rank's slice of the input features; return the whole y (the full layer's
    // | output, bias included once) on every rank: g's forward (Note [f and g]), one
    // | collective waited for, the result in a buffer of the layer's own (cache.y via
    // | detail::ensure()).
    const nn::Tensor& term = local_.forward(x);
    detail::ensure(cache.y, term.shape(), term.dtype());
    cache.y.copy_from(term);
    tp_.allreduce(cache.y.raw(), static_cast<std::size_t>(cache.y.numel()), cache.y.dtype(),
                  ReduceOp::kSum)
        .wait();
    if (has_bias_) add_bias(cache.y, bias_.value);
    return cache.y;
    // END SOLUTION
  }
  require_sequence(x, tp_, name_, "x");
  // BEGIN SOLUTION(RowParallelLinear::forward_sp)
  // | Sequence parallelism: x is (B, S, in/T) for the whole sequences; return this rank's
  // | tokens of every sequence of y, (B, S/T, out) in cache.y, complete and with the bias,
  // | with one collective (Note [Sequence parallelism], handout Task D).
  const nn::Tensor& term = local_.forward(x);
  detail::ensure(cache.y, with_sequence(term.shape(), 1, tp_.world_size()), term.dtype());
  scatter_tokens(tp_, term, cache.y, cache.staging);
  if (has_bias_) add_bias(cache.y, bias_.value);
  return cache.y;
  // END SOLUTION
}

const nn::Tensor& RowParallelLinear::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  detail::require_grad(dy, cache.y, name_);
  if (!options_.sequence_parallel) {
    // BEGIN SOLUTION(RowParallelLinear::backward)
    // | dy is the whole dL/dy on every rank: accumulate db (and announce the bias with
    // | detail::notify()), dW, and return this rank's slice of dL/dx: g's backward (Note [f
    // | and g]); no communication.
    if (has_bias_) {
      add_bias_grad(bias_.grad, dy);
      detail::notify(grad_ready, bias_);
    }
    return local_.backward(dy, grad_ready);
    // END SOLUTION
  }
  // BEGIN SOLUTION(RowParallelLinear::backward_sp)
  // | Sequence parallelism: dy holds this rank's tokens of every sequence, (B, S/T, out).
  // | Accumulate this rank's part of db (completed later by
  // | allreduce_sequence_parallel_gradients(); announce it) and dW, and return this rank's
  // | slice of dL/dx for the whole sequences, (B, S, in/T), with one collective into
  // | cache.gathered (Note [Sequence parallelism], handout Task D).
  if (has_bias_) {
    add_bias_grad(bias_.grad, dy);
    detail::notify(grad_ready, bias_);
  }
  detail::ensure(cache.gathered, with_sequence(dy.shape(), tp_.world_size(), 1), dy.dtype());
  gather_tokens(tp_, dy, cache.gathered, cache.staging);
  return local_.backward(cache.gathered, grad_ready);
  // END SOLUTION
}

}  // namespace dtl::lab08
