// Device scratch memory for the CUDA kernels (see launch.cuh): one grow-only,
// accounted tensor per slot and thread.
#include <array>

#include "harness/error.h"
#include "harness/nn/kernels/launch.cuh"
#include "harness/nn/tensor.h"

namespace dtl::nn::kernels {

void* scratch(int slot, std::size_t bytes) {
  thread_local std::array<Tensor, 8> slots;
  DTL_REQUIRE_ARG(slot >= 0 && slot < static_cast<int>(slots.size()), "kernels::scratch", "slot",
                  "is " + std::to_string(slot) + ", not in [0, 8)");
  Tensor& t = slots[static_cast<std::size_t>(slot)];
  const auto floats = static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
  if (!t.defined() || t.numel() < floats) {
    t = Tensor();  // free first, so the peak never holds both
    t = Tensor::zeros({floats}, DType::kF32, MemoryCategory::kActivations, Device::kCuda);
  }
  return t.raw();
}

}  // namespace dtl::nn::kernels
