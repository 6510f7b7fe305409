// GPU presence and the RAII device buffer.
#include "harness/cuda/device.h"

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

}  // namespace dtl::cuda
