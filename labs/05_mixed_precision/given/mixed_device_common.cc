// Lab 05, given (not a task): the parts of the device path (mixed_device.h) that
// need no kernel, and, in a build without CUDA, the kernels' stand-ins (no tensor
// can live on a GPU there, so they are never reached: they say so if they are).
#include <cstdint>
#include <span>
#include <string>

#include "harness/error.h"
#include "harness/nn/layer_util.h"
#include "mixed_device.h"

namespace dtl::lab05 {

const nn::Tensor& zeroed_flag(nn::Tensor& flag, nn::Device device) {
  nn::detail::ensure(flag, {1}, nn::DType::kI32, device);
  flag.zero();  // on the GPU: a memset queued on the compute stream, ahead of the unscale kernel
  return flag;
}

std::int32_t read_flag(const nn::Tensor& flag) {
  if (nn::is_host(flag.device())) return flag.data<std::int32_t>()[0];
  // The one host wait of the agreement: the host must know whether to step.
  return flag.to(nn::Device::kCpu).data<std::int32_t>()[0];
}

double mean_over_ranks(Communicator& backend, double value, nn::Device device) {
  if (nn::is_host(device)) {
    backend.allreduce_blocking(std::span<double>(&value, 1), ReduceOp::kAvg);
    return value;
  }
  nn::Tensor buf = nn::Tensor::from_values({1}, std::span<const double>(&value, 1), nn::DType::kF64,
                                           nn::MemoryCategory::kOther)
                       .to(device);
  backend.allreduce(buf.raw(), 1, DType::kF64, ReduceOp::kAvg).wait();
  return buf.to(nn::Device::kCpu).data<double>()[0];
}

#ifndef DTL_HAVE_CUDA
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) + ": this build has no CUDA, so no tensor lives on a GPU");
}
}  // namespace
bool is_device_pointer(const void*) { return false; }
void divide_half_on_device(DType, void*, std::size_t, float) { no_cuda("divide_half_on_device"); }
RoundStats round_to_half_on_device(const nn::Tensor&, const nn::Tensor&) { no_cuda("round_to_half_on_device"); }
void unscale_on_device(const nn::Tensor&, const nn::Tensor&, float, const nn::Tensor&) { no_cuda("unscale_on_device"); }
#endif

}  // namespace dtl::lab05
