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

// TODO(student): Helpers of your own for the sequence-parallel blocks, if you want them: the
//   collectives see blocks in rank order, the layers whole sequences in (B, S, C)
//   order (Note [Sequence parallelism]).

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
  // TODO(student): Fill local_ (out/T, in) and its bias with this rank's slice of the full layer's rows,
  //   as Note [Tensor parallelism] cuts them, and with options_.groups > 1 as Note [Splitting
  //   a fused projection] cuts a fused projection (the tests compare with slices of the full
  //   model; handout Task A).
  throw dtl::NotImplemented("ColumnParallelLinear");
}

const nn::Tensor& ColumnParallelLinear::forward(const nn::Tensor& x) {
  if (!options_.sequence_parallel) {
    // TODO(student): Return this rank's slice of y's output features for the whole input x: f's forward
    //   (Note [f and g]); the communication allowed is f's and no more (Comm.* counts the
    //   operations).
    throw dtl::NotImplemented("ColumnParallelLinear::forward");
  }
  detail::require_input(x, local_.weight().value.dtype(), in_, name_, "x");
  DTL_REQUIRE_ARG(x.ndim() >= 2, (name_ + ".forward").c_str(), "x",
                  "has shape " + nn::to_string(x.shape()) + "; with sequence parallelism it is (..., S/T, in)");
  Cache& cache = caches_.at(slot_);
  // TODO(student): Sequence parallelism (Note [Sequence parallelism], handout Task D): x holds this rank's
  //   tokens of every sequence, (B, S/T, in); return this rank's output features for the
  //   whole sequences, (B, S, out/T) in sequence order, with one all-gather; keep the whole
  //   input in cache.gathered (made with detail::ensure()), a buffer in rank order in
  //   cache.staging (ensure_staging()).
  throw dtl::NotImplemented("ColumnParallelLinear::forward_sp");
}

const nn::Tensor& ColumnParallelLinear::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  if (!options_.sequence_parallel) {
    // TODO(student): Accumulate this rank's dW and db and return the whole dL/dx, identical on every rank:
    //   f's backward (Note [f and g]); one collective, waited for before returning.
    throw dtl::NotImplemented("ColumnParallelLinear::backward");
  }
  Cache& cache = caches_.at(slot_);
  // TODO(student): Sequence parallelism: accumulate dW and db and return dL/dx for this rank's tokens of
  //   every sequence only, (B, S/T, in) in cache.dx, complete (summed over every rank's
  //   contribution), with one collective (Note [Sequence parallelism], handout Task D).
  throw dtl::NotImplemented("ColumnParallelLinear::backward_sp");
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
  // TODO(student): Fill local_ (out, in/T) with this rank's slice of the full layer's input columns as
  //   Note [Tensor parallelism] cuts them, and bias_ with the bias as Note [f and g] says a
  //   row-parallel layer keeps it (handout Task A).
  throw dtl::NotImplemented("RowParallelLinear");
}

const nn::Tensor& RowParallelLinear::forward(const nn::Tensor& x) {
  Cache& cache = caches_.at(slot_);
  if (!options_.sequence_parallel) {
    // TODO(student): x is this rank's slice of the input features; return the whole y (the full layer's
    //   output, bias included once) on every rank: g's forward (Note [f and g]), one
    //   collective waited for, the result in a buffer of the layer's own (cache.y via
    //   detail::ensure()).
    throw dtl::NotImplemented("RowParallelLinear::forward");
  }
  require_sequence(x, tp_, name_, "x");
  // TODO(student): Sequence parallelism: x is (B, S, in/T) for the whole sequences; return this rank's
  //   tokens of every sequence of y, (B, S/T, out) in cache.y, complete and with the bias,
  //   with one collective (Note [Sequence parallelism], handout Task D).
  throw dtl::NotImplemented("RowParallelLinear::forward_sp");
}

const nn::Tensor& RowParallelLinear::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  detail::require_grad(dy, cache.y, name_);
  if (!options_.sequence_parallel) {
    // TODO(student): dy is the whole dL/dy on every rank: accumulate db (and announce the bias with
    //   detail::notify()), dW, and return this rank's slice of dL/dx: g's backward (Note [f
    //   and g]); no communication.
    throw dtl::NotImplemented("RowParallelLinear::backward");
  }
  // TODO(student): Sequence parallelism: dy holds this rank's tokens of every sequence, (B, S/T, out).
  //   Accumulate this rank's part of db (completed later by
  //   allreduce_sequence_parallel_gradients(); announce it) and dW, and return this rank's
  //   slice of dL/dx for the whole sequences, (B, S, in/T), with one collective into
  //   cache.gathered (Note [Sequence parallelism], handout Task D).
  throw dtl::NotImplemented("RowParallelLinear::backward_sp");
}

}  // namespace dtl::lab08
