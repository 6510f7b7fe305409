/// @file
/// @brief RAII for CUDA streams and events, and the elapsed time between two events.
///
/// Why events and not a host clock? A kernel launch returns before the kernel
/// runs; a host timer around it measures the launch. Two events recorded on the
/// stream around the work are stamped by the GPU when the stream reaches them,
/// so their difference is the GPU's own time for what lies between.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <utility>

#include "harness/cuda/check.h"

namespace dtl::cuda {

/// @brief A CUDA stream owned by this object (non-blocking with respect to the
/// legacy default stream): move-only, destroyed in the destructor.
class Stream {
 public:
  /// @brief Creates a stream on the current device.
  /// @throws CudaError if cudaStreamCreateWithFlags fails (e.g. no GPU).
  Stream() { DTL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  /// @brief Destroys the stream (errors are ignored: destructors never throw).
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  /// @brief Takes over `other`'s stream; `other` becomes empty.
  /// @param[in,out] other the stream to move from.
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  /// @brief Destroys ours, then takes over `other`'s stream.
  /// @param[in,out] other the stream to move from.
  /// @return *this.
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      Stream old(std::move(*this));
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// @return the handle (still owned by this object).
  cudaStream_t get() const noexcept { return stream_; }
  /// @brief Blocks the host until everything queued on the stream has finished.
  /// @throws CudaError if the stream reports an error (e.g. a failed kernel).
  void synchronize() const { DTL_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// @brief Waits for everything queued on `stream`, as cudaStreamSynchronize does, but
/// at most `seconds`: for work that waits on other processes (lab 03's step flags),
/// where a wait that is never met would otherwise block the host forever.
/// @param[in] stream the stream.
/// @param[in] seconds the most to wait.
/// @return true once the stream has finished; false if it had not after `seconds`.
/// @throws CudaError if the stream reports an error.
inline bool synchronize_within(cudaStream_t stream, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) return true;
    if (rc != cudaErrorNotReady) DTL_CUDA_CHECK(rc);
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

/// @brief A CUDA event owned by this object: move-only, destroyed in the destructor.
class Event {
 public:
  /// @brief Creates an event on the current device.
  /// @param[in] flags cudaEventDefault (timing) or e.g. cudaEventDisableTiming.
  /// @throws CudaError if cudaEventCreateWithFlags fails.
  explicit Event(unsigned flags = cudaEventDefault) { DTL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags)); }
  /// @brief Destroys the event (errors are ignored).
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  /// @brief Takes over `other`'s event; `other` becomes empty.
  /// @param[in,out] other the event to move from.
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  /// @brief Destroys ours, then takes over `other`'s event.
  /// @param[in,out] other the event to move from.
  /// @return *this.
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      Event old(std::move(*this));
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// @return the handle (still owned by this object).
  cudaEvent_t get() const noexcept { return event_; }
  /// @brief Records the event on `stream`: it completes when the stream reaches it.
  /// @param[in] stream the stream to record on.
  /// @throws CudaError if cudaEventRecord fails.
  void record(cudaStream_t stream) const { DTL_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  /// @brief Blocks the host until the event has completed.
  /// @throws CudaError if cudaEventSynchronize fails.
  void synchronize() const { DTL_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

/// @brief The GPU time between two recorded events, in seconds; waits for `stop`.
/// @param[in] start the event recorded before the work.
/// @param[in] stop the event recorded after it, on the same stream.
/// @return seconds (the events' resolution is about half a microsecond).
/// @throws CudaError if either event was not recorded or was made with cudaEventDisableTiming.
inline double elapsed_seconds(const Event& start, const Event& stop) {
  stop.synchronize();
  float ms = 0;
  DTL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace dtl::cuda
