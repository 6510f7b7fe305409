// Lab 08, given (not a task; compiled into both builds): the plumbing of
// OverlappedRowParallelLinear around your forward (src/overlapped_linear.cc): the
// constructor from explicit slices, the backward (the same arithmetic as a
// RowParallelLinear's: no communication, See Note [f and g]; with sequence
// parallelism one all-gather of dy, See Note [Sequence parallelism]), parameters,
// shapes, and make_overlapped() from a RowParallelLinear.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/nn/gemm.h"
#include "harness/nn/layer_util.h"
#include "lab08/overlapped_linear.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // make_parameter(), ensure(), notify(), require_grad(), dispatch_float()

namespace {

std::string tp_rank_of(const Communicator& tp) {
  return "tensor-parallel rank " + std::to_string(tp.rank()) + " of " + std::to_string(tp.world_size());
}

}  // namespace

OverlappedRowParallelLinear::OverlappedRowParallelLinear(std::string name, const nn::Tensor& weight,
                                                         const nn::Tensor& bias, Communicator& tp, int chunks,
                                                         bool sequence_parallel)
    : nn::Layer(std::move(name)),
      tp_(tp),
      chunks_(chunks),
      sequence_parallel_(sequence_parallel),
      in_(0),
      out_(0),
      has_bias_(bias.defined()) {
  // Every check comes before anything is allocated or sent, the same on every rank.
  DTL_REQUIRE_ARG(chunks >= 1, "OverlappedRowParallelLinear", "chunks",
                  "is " + std::to_string(chunks) + " on " + tp_rank_of(tp) + "; it must be at least 1");
  DTL_REQUIRE_ARG(weight.defined() && weight.ndim() == 2, "OverlappedRowParallelLinear", "weight",
                  "must be this rank's (out, in/T) slice, a 2-D tensor, on " + tp_rank_of(tp));
  nn::detail::require_float_dtype(weight.dtype(), "OverlappedRowParallelLinear");
  out_ = weight.dim(0);
  in_ = weight.dim(1);
  DTL_REQUIRE_ARG(!has_bias_ || (bias.shape() == nn::Shape{out_} && bias.dtype() == weight.dtype()),
                  "OverlappedRowParallelLinear", "bias",
                  "must be the whole bias, (" + std::to_string(out_) + ") of the weight's dtype, on " +
                      tp_rank_of(tp));
  weight_ = detail::make_parameter(name_ + ".weight", weight.shape(), weight.dtype());
  weight_.value.copy_from(weight);
  if (has_bias_) {
    bias_ = detail::make_parameter(name_ + ".bias", {out_}, bias.dtype());
    bias_.value.copy_from(bias);
  }
}

const nn::Tensor& OverlappedRowParallelLinear::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  detail::require_grad(dy, cache.y, name_);
  detail::ensure(cache.dx, cache.x.shape(), dy.dtype());
  if (has_bias_) {
    // db += the sum of dy's rows (every rank: the bias is replicated; with sequence
    // parallelism this rank's tokens only, completed by allreduce_sequence_parallel_gradients())
    add_bias_grad(bias_.grad, dy);
    detail::notify(grad_ready, bias_);
  }
  const nn::Tensor& whole = sequence_parallel_ ? gather_dy(dy, cache) : dy;  // (N..., out), every token
  const std::int64_t n = whole.numel() / out_;                                 // rows
  detail::dispatch_float(dy.dtype(), "OverlappedRowParallelLinear::backward", [&](auto zero) {
    using T = decltype(zero);
    // dW_r (out, in/T) += dy^T (out, N) x_r (N, in/T)
    nn::gemm(true, false, out_, in_, n, T{1}, whole.data<T>(), out_, cache.x.data<T>(), in_, T{1},
             weight_.grad.data<T>(), in_);
    detail::notify(grad_ready, weight_);
    // dx_r (N, in/T) = dy (N, out) W_r (out, in/T)
    nn::gemm(false, false, n, in_, out_, T{1}, whole.data<T>(), out_, weight_.value.data<T>(), in_, T{0},
             cache.dx.data<T>(), in_);
  });
  return cache.dx;
}

const nn::Tensor& OverlappedRowParallelLinear::gather_dy(const nn::Tensor& dy, Cache& cache) {
  // dy (B, S/T, out) holds this rank's tokens of every sequence; the all-gather's block q
  // is rank q's, (B, S/T, out); cache.gathered (B, S, out) is in sequence order.
  const int T = tp_.world_size();
  const SequenceShard mine = sequence_shard(cache.x.shape(), T, tp_.rank(), "OverlappedRowParallelLinear.backward",
                                            "dy");
  const std::int64_t sequences = mine.sequences, length = mine.length, s = mine.tokens.size;
  const std::int64_t block = sequences * s * out_, row_bytes = out_ * static_cast<std::int64_t>(dtype_size(dy.dtype()));
  ensure_staging(cache.staging, {T * sequences * s, out_}, dy.dtype());
  detail::ensure(cache.gathered, output_shape_for(cache.x.shape(), false), dy.dtype());
  tp_.allgather(dy.raw(), cache.staging.raw(), static_cast<std::size_t>(block), dy.dtype()).wait();
  const auto* from = static_cast<const std::byte*>(cache.staging.raw());
  auto* to = static_cast<std::byte*>(cache.gathered.raw());
  for (int q = 0; q < T; ++q) {
    for (std::int64_t b = 0; b < sequences; ++b) {
      std::memcpy(to + (b * length + q * s) * row_bytes, from + (q * sequences + b) * s * row_bytes,
                  static_cast<std::size_t>(s * row_bytes));
    }
  }
  return cache.gathered;
}

std::vector<nn::Parameter*> OverlappedRowParallelLinear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

nn::Shape OverlappedRowParallelLinear::output_shape(const nn::Shape& input) const {
  return output_shape_for(input, sequence_parallel_);
}

nn::Shape OverlappedRowParallelLinear::output_shape_for(const nn::Shape& input, bool split) const {
  nn::Shape out = input;
  out.back() = out_;
  if (split && out.size() >= 2) out[out.size() - 2] /= tp_.world_size();  // this rank's S/T tokens
  return out;
}

std::unique_ptr<OverlappedRowParallelLinear> make_overlapped(RowParallelLinear& row, Communicator& tp, int chunks,
                                                             bool sequence_parallel) {
  const std::vector<nn::Parameter*> params = row.parameters();
  const nn::Tensor none;
  return std::make_unique<OverlappedRowParallelLinear>(
      row.name(), params[0]->value, params.size() > 1 ? params[1]->value : none, tp, chunks, sequence_parallel);
}

}  // namespace dtl::lab08
