// The helpers every layer implementation shares (see layer_util.h).
#include "harness/nn/layer_util.h"

namespace dtl::nn::detail {

void require_float_dtype(DType dtype, const char* function) {
  DTL_REQUIRE_ARG(dtype == DType::kF32 || dtype == DType::kF64, function, "dtype",
                  std::string("must be f32 or f64, not ") + dtype_name(dtype));
}

Device common_device(const char* function, std::initializer_list<OpArg> args) {
  const OpArg* first = nullptr;
  for (const OpArg& a : args) {
    if (!a.tensor.defined()) continue;
    if (first == nullptr) {
      first = &a;
      continue;
    }
    const bool same = is_host(a.tensor.device()) == is_host(first->tensor.device());
    DTL_REQUIRE_ARG(same, function, a.name,
                    std::string("is on ") + to_string(a.tensor.device()) + " but " + first->name + " is on " +
                        to_string(first->tensor.device()) + "; an op runs where its tensors are, all on one device");
  }
  if (first == nullptr || is_host(first->tensor.device())) return Device::kCpu;
  return Device::kCuda;
}

void require_input(const Tensor& x, DType dtype, std::int64_t last, const std::string& layer,
                   const char* argument) {
  const std::string where = layer + ".forward";
  DTL_REQUIRE_ARG(x.defined(), where.c_str(), argument, "is undefined");
  DTL_REQUIRE_ARG(x.dtype() == dtype, where.c_str(), argument,
                  std::string("is ") + dtype_name(x.dtype()) + ", the layer's parameters are " + dtype_name(dtype));
  DTL_REQUIRE_ARG(x.ndim() >= 1 && (last < 0 || x.dim(-1) == last), where.c_str(), argument,
                  "has shape " + to_string(x.shape()) + ", expected last dimension " + std::to_string(last));
}

void require_grad(const Tensor& dy, const Tensor& y, const std::string& layer) {
  const std::string where = layer + ".backward";
  DTL_REQUIRE_ARG(y.defined(), where.c_str(), "dy", "came before any forward in this slot");
  DTL_REQUIRE_ARG(dy.defined() && dy.shape() == y.shape() && dy.dtype() == y.dtype(), where.c_str(), "dy",
                  "has shape " + (dy.defined() ? to_string(dy.shape()) : std::string("(undefined)")) +
                      "; the output was " + to_string(y.shape()));
}

void ensure(Tensor& t, const Shape& shape, DType dtype, Device device) {
  // Host ops write host activations to ordinary memory, whatever host memory
  // their input came from (pinned memory is for copies, not for compute).
  const Device where = is_host(device) ? Device::kCpu : device;
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype || t.device() != where) {
    t = Tensor();  // free the old buffer first, so the peak never holds both
    t = Tensor::zeros(shape, dtype, MemoryCategory::kActivations, where);
  }
}

void notify(const GradReadyFn& grad_ready, Parameter& p) {
  if (grad_ready) grad_ready(p);
}

Parameter make_parameter(const std::string& name, const Shape& shape, DType dtype) {
  return Parameter{name, Tensor::zeros(shape, dtype, MemoryCategory::kParameters),
                   Tensor::zeros(shape, dtype, MemoryCategory::kGradients)};
}

void init_parameter(Parameter& p, Rng& rng, double std, double bound) {
  dispatch_float(p.value.dtype(), "init_parameter", [&](auto zero) {
    using T = decltype(zero);
    for (T& v : p.value.span<T>()) v = static_cast<T>(std > 0 ? rng.normal(0.0, std) : rng.uniform(-bound, bound));
  });
}

void fill(const Tensor& t, double value) {
  dispatch_float(t.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    for (T& v : t.span<T>()) v = static_cast<T>(value);
  });
}

}  // namespace dtl::nn::detail
