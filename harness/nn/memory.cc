// The memory tracker: atomic counters, and peaks raised with compare-exchange.
#include "harness/nn/memory.h"

#include <cstdio>

namespace dtl::nn {

namespace {

// Raises `peak` to at least `value`. A plain load-compare-store could lose a
// higher value written by another thread in between; the CAS loop cannot.
void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

const char* to_string(MemoryCategory category) noexcept {
  switch (category) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kCommunication: return "communication";
    case MemoryCategory::kOther: return "other";
  }
  return "unknown";
}

const char* to_string(Device device) noexcept {
  switch (device) {
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
    case Device::kPinnedHost: return "pinned";
  }
  return "unknown";
}

void MemoryTracker::allocated(MemoryCategory category, std::int64_t bytes) noexcept {
  const auto c = static_cast<std::size_t>(category);
  const std::int64_t now = current_[c].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_peak(peak_[c], now);
  const std::int64_t total = current_total_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_peak(peak_total_, total);
}

void MemoryTracker::freed(MemoryCategory category, std::int64_t bytes) noexcept {
  current_[static_cast<std::size_t>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  current_total_.fetch_sub(bytes, std::memory_order_relaxed);
}

std::int64_t MemoryTracker::current(MemoryCategory category) const noexcept {
  return current_[static_cast<std::size_t>(category)].load(std::memory_order_relaxed);
}

std::int64_t MemoryTracker::peak(MemoryCategory category) const noexcept {
  return peak_[static_cast<std::size_t>(category)].load(std::memory_order_relaxed);
}

std::int64_t MemoryTracker::current_total() const noexcept {
  return current_total_.load(std::memory_order_relaxed);
}

std::int64_t MemoryTracker::peak_total() const noexcept {
  return peak_total_.load(std::memory_order_relaxed);
}

void MemoryTracker::reset_peak() noexcept {
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    peak_[c].store(current_[c].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  peak_total_.store(current_total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemorySnapshot MemoryTracker::snapshot() const noexcept {
  MemorySnapshot s;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    s.current[c] = current_[c].load(std::memory_order_relaxed);
    s.peak[c] = peak_[c].load(std::memory_order_relaxed);
  }
  s.current_total = current_total();
  s.peak_total = peak_total();
  return s;
}

std::string MemoryTracker::report() const {
  const MemorySnapshot s = snapshot();
  std::string out;
  char line[128];
  std::snprintf(line, sizeof line, "  %-16s %12s %12s\n", "category", "current", "peak");
  out += line;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    std::snprintf(line, sizeof line, "  %-16s %12s %12s\n", to_string(static_cast<MemoryCategory>(c)),
                  human_bytes(s.current[c]).c_str(), human_bytes(s.peak[c]).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-16s %12s %12s\n", "total", human_bytes(s.current_total).c_str(),
                human_bytes(s.peak_total).c_str());
  out += line;
  return out;
}

MemoryTracker& memory_tracker(Device device) noexcept {
  static std::array<MemoryTracker, kDeviceCount> trackers;
  return trackers[static_cast<std::size_t>(device)];
}

std::string human_bytes(std::int64_t bytes) {
  char text[48];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024 && bytes > -1024) {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  } else if (b < 1024.0 * 1024 && b > -1024.0 * 1024) {
    std::snprintf(text, sizeof text, "%.2f KiB", b / 1024);
  } else if (b < 1024.0 * 1024 * 1024 && b > -1024.0 * 1024 * 1024) {
    std::snprintf(text, sizeof text, "%.2f MiB", b / (1024.0 * 1024));
  } else {
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  }
  return text;
}

}  // namespace dtl::nn
