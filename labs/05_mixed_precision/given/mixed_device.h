// Lab 05, given (not a task): the device half of your files in src/. When a
// tensor lives on the GPU (the model was moved with Model::to(Device::kCuda)
// and the backend is NCCL), your code calls these where the CPU path loops over
// host memory; each one is the same per-element arithmetic as your loop
// (mixed_device_math.h, written once for host and device), queued on the compute
// stream (harness/nn/compute_stream.h). Defined in given/mixed_device.cu where
// CUDA is built; without CUDA no tensor can live on the GPU and these throw.
// See Note [The GPU step] in lab05/mixed.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "harness/comm/communicator.h"
#include "harness/nn/tensor.h"
#include "lab05/mixed.h"

namespace dtl::lab05 {

/// @brief Whether `ptr` is device memory (cudaPointerGetAttributes; false for host memory,
/// null, and in a build or on a machine without a GPU).
/// @param[in] ptr any pointer.
/// @return true for memory on a GPU.
bool is_device_pointer(const void* ptr);

/// @brief divide_half() on a device buffer: buf[i] = round16(float(buf[i]) / divisor), on the compute stream.
/// @param[in] dtype DType::kF16 or DType::kBF16.
/// @param[in,out] buf device pointer to `count` elements.
/// @param[in] count elements.
/// @param[in] divisor > 0.
/// @throws dtl::CudaError if the launch fails; dtl::Error without CUDA.
void divide_half_on_device(DType dtype, void* buf, std::size_t count, float divisor);

/// @brief round_to_half() on device tensors: dst = round(src), and the counts of
/// RoundStats taken on the device (mixed_device_math.h's round_class()), read back once.
/// @param[out] dst f16, bf16 or f32 on the GPU. @param[in] src f32 on the GPU, as many elements.
/// @return the counts (a copy of three integers to the host, waited for on the compute stream).
/// @throws dtl::CudaError if a launch or copy fails; dtl::Error without CUDA.
RoundStats round_to_half_on_device(const nn::Tensor& dst, const nn::Tensor& src);

/// @brief The unscale of LossScaler::unscale_and_check() on device tensors:
/// out[i] = float(grads[i]) * inv_scale, and flag[0] = 1 if any out[i] is inf or NaN
/// (left as it was otherwise: zero it first). Nothing is read back: the flag stays
/// on the device for the collective that agrees on it.
/// @param[in] grads f16, bf16 or f32 on the GPU. @param[out] out f32 on the GPU (may be grads when f32).
/// @param[in] inv_scale 1 / S. @param[in,out] flag one i32 on the GPU.
/// @throws dtl::CudaError if the launch fails; dtl::Error without CUDA.
void unscale_on_device(const nn::Tensor& grads, const nn::Tensor& out, float inv_scale, const nn::Tensor& flag);

/// @brief A zeroed one-element i32 flag on `device`, kept in `flag` across calls so that a
/// step allocates nothing once it runs (a cudaMalloc may synchronize the device).
/// @param[in,out] flag the cached tensor (allocated on first use, or when the device changes).
/// @param[in] device where the gradients live.
/// @return `flag`, zeroed (on the GPU: a memset queued on the compute stream).
const nn::Tensor& zeroed_flag(nn::Tensor& flag, nn::Device device);

/// @brief The flag's value on the host (on the GPU: one 4-byte copy, waited for on the compute stream).
/// @param[in] flag one i32.
/// @return flag[0].
std::int32_t read_flag(const nn::Tensor& flag);

/// @brief The mean of one double over the ranks of `backend` (ReduceOp::kAvg), through a
/// one-element buffer on `device`: NCCL takes device memory only.
///
/// Collective: every rank of `backend` must call it.
/// @param[in] backend the ranks. @param[in] value this rank's value. @param[in] device where the buffer goes.
/// @return the mean, the same on every rank.
double mean_over_ranks(Communicator& backend, double value, nn::Device device);

}  // namespace dtl::lab05
