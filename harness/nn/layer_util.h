/// @file
/// @brief What every layer's implementation shares: dtype dispatch, argument
/// checks with messages that name the layer, activation buffers that are
/// reused across steps, and parameter creation. Internal to the layer .cc
/// files (namespace dtl::nn::detail); not part of the API.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "harness/error.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/layer_interface.h"
#include "harness/random.h"
#include "harness/nn/tensor.h"

namespace dtl::nn::detail {

/// @brief Runs f(T{}) with T = float or double, matching `dtype`: the layers'
/// kernels are templates over the element type, and this picks one.
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @param[in] function named in the error.
/// @param[in] f called once with a zero of the element type.
/// @throws dtl::InvalidArgument for any other dtype.
template <typename F>
void dispatch_float(DType dtype, const char* function, F&& f) {
  if (dtype == DType::kF32) {
    f(float{});
  } else if (dtype == DType::kF64) {
    f(double{});
  } else {
    throw_invalid_argument(function, "dtype", std::string("must be f32 or f64, not ") + dtype_name(dtype));
  }
}

/// @brief A tensor an op reads or writes, with its name for the error messages.
struct OpArg {
  const char* name;  ///< e.g. "x", "weight"
  const Tensor& tensor;  ///< undefined tensors (a missing bias) are skipped
};

/// @brief The device all of an op's defined tensors live on.
/// @param[in] function named in the error.
/// @param[in] args the op's tensors.
/// @return their common device (kCpu if none is defined; pinned host memory counts as the CPU).
/// @throws dtl::InvalidArgument naming both tensors and both devices if two differ.
Device common_device(const char* function, std::initializer_list<OpArg> args);

/// Note [One dispatch point]
/// Every op of every layer is written once, as a generic lambda that calls the
/// op's kernel with a tag first: `linear_forward(on, y, x, ...)`. dispatch()
/// looks at where the tensors are and what dtype they hold, and calls the
/// lambda with
///   - (OnCpu{}, float{}) or (OnCpu{}, double{}) for host tensors: the kernel is
///     the layer's own loop, unchanged (a template over T in its .cc file);
///   - (OnCuda{compute_stream()}, float{}) for GPU tensors: the kernel is the
///     overload declared in kernels/kernels.h, defined in kernels/*.cu.
/// Overload resolution on the tag picks the kernel at compile time, so no layer
/// holds an `if (cuda)`; the device is decided here, once per op, and an op
/// whose tensors live on two devices is refused with both names.
/// f64 on the GPU is refused too: f64 is the gradient checks' dtype.
///
/// @param[in] function named in the errors, e.g. "Linear::forward".
/// @param[in] args every tensor the op touches (device check).
/// @param[in] dtype the element type (DType::kF32 or DType::kF64; f32 only on the GPU).
/// @param[in] f called once as f(tag, T{}).
/// @throws dtl::InvalidArgument on mixed devices or an unsupported dtype.
template <typename F>
void dispatch(const char* function, std::initializer_list<OpArg> args, DType dtype, F&& f) {
  if (common_device(function, args) == Device::kCuda) {
#ifdef DTL_HAVE_CUDA
    DTL_REQUIRE_ARG(dtype == DType::kF32, function, "dtype",
                    std::string("is ") + dtype_name(dtype) + "; on the GPU the layers compute in f32 only");
    f(OnCuda{compute_stream()}, float{});
    return;
#else
    throw_invalid_argument(function, "tensors", "are on cuda, but this build has no CUDA");
#endif
  }
  dispatch_float(dtype, function, [&](auto zero) { f(OnCpu{}, zero); });
}

/// @brief Refuses a parameter dtype the layers cannot compute in.
/// @param[in] dtype must be DType::kF32 or DType::kF64.
/// @param[in] function named in the error.
/// @throws dtl::InvalidArgument otherwise.
void require_float_dtype(DType dtype, const char* function);

/// @brief x must be defined, have `dtype`, at least one dimension,
/// and last dimension `last` (any when last < 0).
/// @param[in] x the forward input.
/// @param[in] dtype the layer's dtype.
/// @param[in] last the required last dimension, or -1.
/// @param[in] layer the layer's name, for the message.
/// @param[in] argument the argument's name, for the message.
/// @throws dtl::InvalidArgument naming `layer`.forward.
void require_input(const Tensor& x, DType dtype, std::int64_t last, const std::string& layer,
                   const char* argument);

/// @brief dy must match the output y of the forward it is the gradient of.
/// @param[in] dy the backward input.
/// @param[in] y the forward output of the same slot (undefined: no forward yet).
/// @param[in] layer the layer's name, for the message.
/// @throws dtl::InvalidArgument naming `layer`.backward.
void require_grad(const Tensor& dy, const Tensor& y, const std::string& layer);

/// @brief Makes `t` an activation buffer of this shape and dtype.
///
/// A buffer of the right shape is reused (overwritten): a layer's output lives
/// until the next forward in the same slot, so steady-state training allocates
/// nothing.
/// @param[in,out] t the buffer.
/// @param[in] shape its shape.
/// @param[in] dtype its dtype.
/// @param[in] device the op's device: a layer's output lives on the GPU when its input does,
///            and in ordinary host memory (kCpu) otherwise.
void ensure(Tensor& t, const Shape& shape, DType dtype, Device device = Device::kCpu);

/// @brief Calls grad_ready(p) if there is a callback.
/// @param[in] grad_ready the callback, possibly empty.
/// @param[in,out] p the parameter whose gradient is final.
void notify(const GradReadyFn& grad_ready, Parameter& p);

/// @brief A parameter of zeros and its zero gradient.
/// @param[in] name the parameter's name.
/// @param[in] shape its shape.
/// @param[in] dtype its dtype.
/// @return the parameter (value on kParameters, grad on kGradients).
Parameter make_parameter(const std::string& name, const Shape& shape, DType dtype);

/// @brief Fills a parameter from rng: normal(0, std) when std > 0, else uniform +-bound.
/// @param[in,out] p the parameter.
/// @param[in,out] rng the generator.
/// @param[in] std the standard deviation, or <= 0 for uniform.
/// @param[in] bound the uniform bound.
void init_parameter(Parameter& p, Rng& rng, double std, double bound);

/// @brief Sets every element of a float tensor to `value`.
/// @param[in] t the tensor (f32 or f64).
/// @param[in] value the value.
void fill(const Tensor& t, double value);

}  // namespace dtl::nn::detail
