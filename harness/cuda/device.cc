// GPU presence, the RAII device buffer, and the waited-for copies (copy.h).
#include "harness/cuda/device.h"

#include "harness/cuda/copy.h"

#include <utility>

#include "harness/cuda/check.h"

namespace dtl::cuda {

int gpu_count(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why != nullptr) *why = std::string("no usable GPU: ") + cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "no GPU on this machine";
  return count;
}

bool is_device_pointer(const void* ptr) noexcept {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // clear it: an unknown pointer is host memory here
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) DTL_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  DTL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  // See Note [Copies beside non-blocking streams] in copy.h.
  DTL_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void zero(void* dst, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  DTL_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream));
  DTL_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace dtl::cuda
