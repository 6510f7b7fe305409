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
//     ColumnParallel      all-gather x's rows     reduce-scatter dx
//     RowParallel         reduce-scatter y        all-gather dy's rows
//
// Rows are the first dimension and tensors are contiguous, so "the rows of every
// rank, in rank order" is exactly the Communicator's allgather (block r = rank
// r's buffer) and "this rank's rows of the sum" its reduce_scatter.
#include <string>
#include <utility>

#include "harness/nn/layer_util.h"
#include "lab08/parallel_linear.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // ensure(), notify(), require_grad(), dispatch_float()

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
  Cache& cache = caches_.at(slot_);
  // BEGIN SOLUTION(ColumnParallelLinear::forward_sp)
  // | Sequence parallelism (Note [Sequence parallelism], handout Task D): x holds this rank's
  // | rows only (dimension 0); return this rank's output features for every rank's rows, with
  // | one all-gather into cache.gathered (made with detail::ensure()).
  nn::Shape all = x.shape();
  all[0] *= tp_.world_size();
  detail::ensure(cache.gathered, all, x.dtype());
  tp_.allgather(x.raw(), cache.gathered.raw(), static_cast<std::size_t>(x.numel()), x.dtype()).wait();
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
  // | Sequence parallelism: accumulate dW and db and return dL/dx for this rank's own rows
  // | only (first dimension 1/T of the local dx, in cache.dx), complete (summed over every
  // | rank's contribution), with one collective (Note [Sequence parallelism], handout Task
  // | D).
  const nn::Tensor& dx_all = local_.backward(dy, grad_ready);
  nn::Shape mine = dx_all.shape();
  mine[0] /= tp_.world_size();
  detail::ensure(cache.dx, mine, dx_all.dtype());
  tp_.reduce_scatter(dx_all.raw(), cache.dx.raw(), static_cast<std::size_t>(cache.dx.numel()),
                     dx_all.dtype(), ReduceOp::kSum)
      .wait();
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
  require_rows(x, tp_.world_size(), name_, "x");
  // BEGIN SOLUTION(RowParallelLinear::forward_sp)
  // | Sequence parallelism: return this rank's 1/T of y's rows (cache.y), complete and with
  // | the bias, with one collective (Note [Sequence parallelism], handout Task D).
  const nn::Tensor& term = local_.forward(x);
  nn::Shape mine = term.shape();
  mine[0] /= tp_.world_size();
  detail::ensure(cache.y, mine, term.dtype());
  tp_.reduce_scatter(term.raw(), cache.y.raw(), static_cast<std::size_t>(cache.y.numel()), term.dtype(),
                     ReduceOp::kSum)
      .wait();
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
  // | Sequence parallelism: dy holds this rank's rows only. Accumulate this rank's part of db
  // | (completed later by allreduce_sequence_parallel_gradients(); announce it) and dW, and
  // | return this rank's slice of dL/dx for every rank's rows, with one collective into
  // | cache.gathered (Note [Sequence parallelism], handout Task D).
  if (has_bias_) {
    add_bias_grad(bias_.grad, dy);
    detail::notify(grad_ready, bias_);
  }
  nn::Shape all = dy.shape();
  all[0] *= tp_.world_size();
  detail::ensure(cache.gathered, all, dy.dtype());
  tp_.allgather(dy.raw(), cache.gathered.raw(), static_cast<std::size_t>(dy.numel()), dy.dtype()).wait();
  return local_.backward(cache.gathered, grad_ready);
  // END SOLUTION
}

}  // namespace dtl::lab08
