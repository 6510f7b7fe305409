/// @file
/// @brief Where the bytes go: a per-process tracker of tensor memory by category.
///
/// What this file teaches: training memory is not one number. Parameters,
/// gradients and optimizer state scale with the model (AdamW: 4 + 4 + 8 bytes
/// per f32 parameter); activations scale with batch × sequence × width and
/// live from a layer's forward until its backward; communication buffers are
/// what a distributed algorithm adds on top. Lab 06 (FSDP) is graded on these
/// numbers, so every Tensor's storage is charged to one MemoryCategory and the
/// counts here are exact: a storage of `numel` elements of a dtype of `size`
/// bytes adds exactly `numel * size` bytes, no padding, no rounding. (The system
/// allocator may round up internally; that is not counted.)
///
/// Counters are atomics, so tensors may be created and freed from several
/// threads (lab 04's communication thread). There is one tracker per device:
/// memory_tracker(Device::kCpu), memory_tracker(Device::kCuda) and
/// memory_tracker(Device::kPinnedHost).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace dtl::nn {

/// @brief What a tensor's memory is for; every storage is charged to exactly one.
enum class MemoryCategory : int {
  kParameters = 0,   ///< model weights (and their flat buffers, full or sharded)
  kGradients,        ///< gradients of the parameters
  kOptimizerState,   ///< momentum, Adam's first and second moments, master weights
  kActivations,      ///< layer outputs and caches kept for backward, and their gradients
  kCommunication,    ///< buffers that exist only to send or receive (buckets, gather buffers)
  kOther,            ///< anything else (inputs, scratch)
};

/// @brief The number of MemoryCategory values.
inline constexpr int kMemoryCategoryCount = 6;

/// @brief The category's name, e.g. "parameters".
/// @param[in] category the category.
/// @return a static lower-case name.
const char* to_string(MemoryCategory category) noexcept;

/// @brief Where a tensor lives.
enum class Device : int {
  kCpu = 0,     ///< host memory
  kCuda,        ///< memory of the current CUDA device (only where built with CUDA and a GPU is present)
  /// Host memory set aside for data kept off the compute device (lab 06's CPU
  /// offload): page-locked (cudaMallocHost) in a CUDA build, so copies to and
  /// from the GPU run at full PCIe speed; ordinary host memory otherwise. The
  /// CPU reads and writes it directly. Its own tracker is what lets a program
  /// show where its bytes live, GPU or not.
  kPinnedHost,
};

/// @brief The number of Device values (and of trackers).
inline constexpr int kDeviceCount = 3;

/// @brief Whether the CPU can read and write memory on `device` directly.
/// @param[in] device the device.
/// @return true for kCpu and kPinnedHost.
constexpr bool is_host(Device device) noexcept { return device != Device::kCuda; }

/// @brief The device's name, "cpu", "cuda" or "pinned".
/// @param[in] device the device.
/// @return a static name.
const char* to_string(Device device) noexcept;

/// @brief A consistent-enough copy of the counters (each value read atomically).
struct MemorySnapshot {
  std::array<std::int64_t, kMemoryCategoryCount> current{};  ///< bytes now, per category
  std::array<std::int64_t, kMemoryCategoryCount> peak{};     ///< highest bytes since reset, per category
  std::int64_t current_total = 0;                            ///< bytes now, all categories
  std::int64_t peak_total = 0;  ///< highest sum since reset (not the sum of the per-category peaks)
};

/// @brief Current and peak bytes per MemoryCategory and in total, for one device.
///
/// Storage calls allocated() and freed(); everything else only reads. The peak
/// of the total is the highest value the *sum* ever had, which is at most the
/// sum of the per-category peaks (they need not happen at the same time).
class MemoryTracker {
 public:
  /// @brief A tracker with every counter at zero.
  MemoryTracker() = default;
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  /// @brief Records `bytes` more in `category`, raising the peaks if needed.
  /// @param[in] category what the memory is for.
  /// @param[in] bytes how many bytes were allocated (>= 0).
  void allocated(MemoryCategory category, std::int64_t bytes) noexcept;
  /// @brief Records `bytes` fewer in `category`.
  /// @param[in] category the category the memory was charged to.
  /// @param[in] bytes how many bytes were freed (>= 0).
  void freed(MemoryCategory category, std::int64_t bytes) noexcept;

  /// @brief Bytes allocated now in one category.
  /// @param[in] category the category.
  /// @return the current bytes.
  std::int64_t current(MemoryCategory category) const noexcept;
  /// @brief The highest value current(category) reached since the last reset_peak().
  /// @param[in] category the category.
  /// @return the peak bytes.
  std::int64_t peak(MemoryCategory category) const noexcept;
  /// @brief Bytes allocated now in all categories together.
  /// @return the current total.
  std::int64_t current_total() const noexcept;
  /// @brief The highest total since the last reset_peak().
  /// @return the peak total.
  std::int64_t peak_total() const noexcept;
  /// @brief Sets every peak (per category and total) to its current value.
  void reset_peak() noexcept;
  /// @brief Reads all counters.
  /// @return the current and peak bytes per category and in total.
  MemorySnapshot snapshot() const noexcept;
  /// @brief A small table: one line per category with current and peak bytes, then the total.
  /// @return the table as text (human units, e.g. "1.50 MiB").
  std::string report() const;

 private:
  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> current_{};
  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> peak_{};
  std::atomic<std::int64_t> current_total_{0};
  std::atomic<std::int64_t> peak_total_{0};
};

/// @brief The process-wide tracker of one device.
/// @param[in] device which device's memory (default: host).
/// @return the tracker; it lives as long as the process.
MemoryTracker& memory_tracker(Device device = Device::kCpu) noexcept;

/// @brief Bytes in human units: "512 B", "1.50 KiB", "3.00 MiB", "1.25 GiB".
/// @param[in] bytes the byte count.
/// @return the text.
std::string human_bytes(std::int64_t bytes);

}  // namespace dtl::nn
