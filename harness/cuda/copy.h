/// @file
/// @brief The one way the harness, the tests and the benchmarks move bytes between
/// host and device memory: on the stream that consumes them, and waited for.
///
/// Note [Copies beside non-blocking streams]
/// Two facts of CUDA make a plain `cudaMemcpy` unsafe next to the streams this
/// project uses:
///  - a host-to-device `cudaMemcpy` from pageable memory may return once the bytes
///    are staged, before the DMA into device memory has landed;
///  - a stream created `cudaStreamNonBlocking` (dtl::cuda::Stream) is not ordered
///    after the legacy default stream, which is where `cudaMemcpy` runs.
/// So "upload with cudaMemcpy, then launch on our stream" can read the old bytes.
/// The first GPU run (H100, 2026-11-27) saw exactly that: lab 03's virtual-ring
/// test failed 3 of 3 times at 2 and 4 processes sharing the GPU, and passed with
/// a synchronize after the upload. A third party is worse off still: another
/// process reading this buffer through CUDA IPC is ordered after nothing here.
///
/// Hence one rule: every copy is issued on the stream that will consume (or that
/// produced) the data, and the host waits for it. When these functions return, the
/// bytes are in place for every stream and every process. Waiting costs a host
/// round trip; the hot paths (rings, collectives) never copy through here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

namespace dtl::cuda {

/// @brief Copies `bytes` bytes (any direction: host or device pointers) on
/// `stream`, then waits for that stream.
/// @param[out] dst where the bytes go.
/// @param[in] src where they come from (must not overlap `dst`).
/// @param[in] bytes how many; 0 does nothing.
/// @param[in] stream the stream that consumes (or produced) the data; null is the legacy default stream.
/// @throws CudaError if the copy or the wait fails.
void copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

/// @brief Zeroes `bytes` bytes of device memory on `stream`, then waits for it.
/// @param[out] dst device memory.
/// @param[in] bytes how many; 0 does nothing.
/// @param[in] stream as for copy().
/// @throws CudaError if the memset or the wait fails.
void zero(void* dst, std::size_t bytes, cudaStream_t stream);

/// @brief Host elements into device memory (see copy()).
/// @tparam T a trivially copyable element type.
/// @param[out] device `host.size()` elements of device memory.
/// @param[in] host the elements.
/// @param[in] stream the stream that will read them.
template <typename T>
void upload(T* device, std::span<const T> host, cudaStream_t stream) {
  copy(device, host.data(), host.size_bytes(), stream);
}

/// @brief Device elements into a new host vector (see copy()).
/// @tparam T a trivially copyable element type.
/// @param[in] device `count` elements of device memory.
/// @param[in] count how many.
/// @param[in] stream the stream that wrote them.
/// @return the elements.
template <typename T>
std::vector<T> download(const T* device, std::size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  copy(host.data(), device, count * sizeof(T), stream);
  return host;
}

}  // namespace dtl::cuda
