/// @file
/// @brief The compute stream: the one CUDA stream every layer, loss and optimizer
/// step of harness/nn runs on when its tensors live on the GPU.
///
/// Note [The compute stream]
/// An op never takes a stream argument and never picks one itself: it inherits
/// the calling thread's compute stream, set here (default: the legacy default
/// stream, null). So a whole training step is queued, in order, on one stream,
/// and the rules are those of one stream:
///   - kernels, cuBLAS calls, Tensor::zero() and device-to-device copies are
///     queued on it and return at once; no op synchronizes the device;
///   - an op that must hand a number to the host (the loss, the count of correct
///     predictions) copies it on this stream and waits for this stream only
///     (harness/cuda/copy.h), once per call;
///   - another stream that reads what an op wrote (lab 04's allreduce of a
///     finished gradient bucket on a side stream) must wait for an event
///     recorded on this stream first, and this stream must wait for the side
///     stream's event before it overwrites the buffer. That is the caller's
///     business, done in one place, not in each op.
/// Allocation is queued too: device memory comes and goes with cudaMallocAsync
/// and cudaFreeAsync on this stream (Note [Stream-ordered device memory] in
/// tensor.cc), never a device-wide cudaFree. Activation buffers are still reused
/// (detail::ensure), so steady-state training allocates little.
///
/// The stream is a `CUstream_st*` (what `cudaStream_t` is) so that this header
/// needs no CUDA header and compiles in a build without CUDA.
#pragma once

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace dtl::nn {

/// @brief The calling thread's compute stream (null: the legacy default stream).
/// @return the stream every op on device tensors runs on.
CUstream_st* compute_stream() noexcept;

/// @brief Sets the calling thread's compute stream; see Note [The compute stream].
/// @param[in] stream a stream on the current device, or null for the legacy default stream.
void set_compute_stream(CUstream_st* stream) noexcept;

/// @brief Makes `stream` the compute stream for one scope and restores the previous one after.
class ComputeStreamScope {
 public:
  /// @brief Switches to `stream`.
  /// @param[in] stream the stream for the scope.
  explicit ComputeStreamScope(CUstream_st* stream) noexcept : previous_(compute_stream()) {
    set_compute_stream(stream);
  }
  /// @brief Restores the previous stream.
  ~ComputeStreamScope() { set_compute_stream(previous_); }
  ComputeStreamScope(const ComputeStreamScope&) = delete;
  ComputeStreamScope& operator=(const ComputeStreamScope&) = delete;

 private:
  CUstream_st* previous_;
};

}  // namespace dtl::nn
