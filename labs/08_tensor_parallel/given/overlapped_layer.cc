// Lab 08, given (not a task; compiled into both builds): the plumbing of
// OverlappedRowParallelLinear around your forward (src/overlapped_linear.cc): the
// constructor from explicit slices, the backward (the same arithmetic as a
// RowParallelLinear's: no communication, See Note [f and g]), parameters, shapes,
// and make_overlapped() from a RowParallelLinear.
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
                                                         const nn::Tensor& bias, Communicator& tp, int chunks)
    : nn::Layer(std::move(name)), tp_(tp), chunks_(chunks), in_(0), out_(0), has_bias_(bias.defined()) {
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
  const std::int64_t n = dy.numel() / out_;  // rows
  detail::ensure(cache.dx, cache.x.shape(), dy.dtype());
  if (has_bias_) {
    add_bias_grad(bias_.grad, dy);  // db += the sum of dy's rows (every rank: the bias is replicated)
    detail::notify(grad_ready, bias_);
  }
  detail::dispatch_float(dy.dtype(), "OverlappedRowParallelLinear::backward", [&](auto zero) {
    using T = decltype(zero);
    // dW_r (out, in/T) += dy^T (out, N) x_r (N, in/T)
    nn::gemm(true, false, out_, in_, n, T{1}, dy.data<T>(), out_, cache.x.data<T>(), in_, T{1},
             weight_.grad.data<T>(), in_);
    detail::notify(grad_ready, weight_);
    // dx_r (N, in/T) = dy (N, out) W_r (out, in/T)
    nn::gemm(false, false, n, in_, out_, T{1}, dy.data<T>(), out_, weight_.value.data<T>(), in_, T{0},
             cache.dx.data<T>(), in_);
  });
  return cache.dx;
}

std::vector<nn::Parameter*> OverlappedRowParallelLinear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

nn::Shape OverlappedRowParallelLinear::output_shape(const nn::Shape& input) const {
  nn::Shape out = input;
  out.back() = out_;
  return out;
}

std::unique_ptr<OverlappedRowParallelLinear> make_overlapped(RowParallelLinear& row, Communicator& tp, int chunks) {
  const std::vector<nn::Parameter*> params = row.parameters();
  const nn::Tensor none;
  return std::make_unique<OverlappedRowParallelLinear>(row.name(), params[0]->value,
                                                       params.size() > 1 ? params[1]->value : none, tp, chunks);
}

}  // namespace dtl::lab08
