/// @file
/// @brief GPU presence and an RAII device buffer.
#pragma once

#include <cstddef>
#include <string>

namespace dtl::cuda {

/// @brief The number of usable GPUs; 0 when there is no GPU or no driver.
/// Any error from cudaGetDeviceCount (e.g. "driver version is insufficient" on a
/// machine without a GPU) means "no GPU" here, with the reason in `why`.
/// @param[out] why when not null and the count is 0, the reason.
/// @return the number of GPUs (0 on any error).
int gpu_count(std::string* why = nullptr);

/// @brief Whether `ptr` points into device memory (cudaMalloc, cudaMallocAsync or
/// managed), as cudaPointerGetAttributes says; host memory, pinned or not, and any
/// error (no GPU, no driver) mean false. What HostDeviceCommunicator routes by
/// (Note [Host and device buffers] in harness/comm/host_device_communicator.h).
/// @param[in] ptr any pointer.
/// @return true for device (or managed) memory.
bool is_device_pointer(const void* ptr) noexcept;

/// @brief Device memory owned by this object: move-only, freed in the destructor.
class DeviceBuffer {
 public:
  /// @brief An empty buffer (no allocation).
  DeviceBuffer() noexcept = default;
  /// @brief Allocates `bytes` bytes of device memory.
  /// @param[in] bytes how much to allocate (0 allocates nothing).
  /// @throws CudaError if cudaMalloc fails.
  explicit DeviceBuffer(std::size_t bytes);
  /// @brief Frees the memory (errors are ignored: destructors never throw).
  ~DeviceBuffer();
  /// @brief Takes over `other`'s memory; `other` becomes empty.
  /// @param[in,out] other the buffer to move from.
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  /// @brief Frees ours, then takes over `other`'s memory.
  /// @param[in,out] other the buffer to move from.
  /// @return *this.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// @return the device pointer (null when empty).
  void* data() const noexcept { return data_; }
  /// @return the size in bytes.
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dtl::cuda
