// Lab 04, given: the Reducer's bookkeeping around your tasks (src/ddp_reducer.cc):
// the mode names, the per-step reset, the statistics of a step (how long finish()
// waited, and the link's busy time as the union of the operations' spans, which
// overlap_fraction() compares), the destructor, and no_sync()'s guard.
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "lab04/ddp.h"

namespace dtl::lab04 {

const char* reducer_mode_name(ReducerMode mode) {
  switch (mode) {
    case ReducerMode::kNaive: return "naive";
    case ReducerMode::kBucketed: return "bucketed";
    case ReducerMode::kOverlapped: return "overlapped";
  }
  return "?";
}

double StepStats::overlap_fraction() const {
  if (comm_seconds <= 0.0) return 0.0;
  return std::clamp((comm_seconds - exposed_seconds) / comm_seconds, 0.0, 1.0);
}

Reducer::~Reducer() {
  model_.hooks().grad_ready = nullptr;
  // work_'s destructors wait for anything still pending (and print, not throw, its errors).
}

void Reducer::reset_step() {
  pending_.assign(buckets_.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].parameters.size();
  ready_.assign(params_.size(), 0);
  work_.clear();
  work_.resize(buckets_.size());
  next_launch_ = 0;
}

void Reducer::record_stats(double wait_begin, double wait_end) {
  stats_.exposed_seconds = wait_end - wait_begin;
  // Busy time of the link: the union of the operations' [start, end] spans.
  std::vector<std::pair<double, double>> spans;
  for (std::size_t b = 0; b < next_launch_; ++b) {
    spans.emplace_back(work_[b].start_seconds(), work_[b].end_seconds());
    if (options_.timeline != nullptr) {
      options_.timeline->add_work("comm", work_[b],
                                  "bucket " + std::to_string(b) + " allreduce (" +
                                      std::to_string(buckets_[b].count * sizeof(float)) + " B)");
    }
  }
  std::sort(spans.begin(), spans.end());
  double busy = 0.0, begin = 0.0, end = -1.0;
  for (const auto& [s, e] : spans) {
    if (s > end) {
      if (end > begin) busy += end - begin;
      begin = s;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > begin) busy += end - begin;
  stats_.comm_seconds = busy;
  stats_.last_end_seconds = spans.empty() ? 0.0 : std::max_element(spans.begin(), spans.end(), [](auto a, auto b) {
                                                     return a.second < b.second;
                                                   })->second;
}

Reducer::NoSync::NoSync(Reducer* reducer) : reducer_(reducer) {}
Reducer::NoSync::NoSync(NoSync&& other) noexcept : reducer_(std::exchange(other.reducer_, nullptr)) {}
Reducer::NoSync::~NoSync() {
  if (reducer_ != nullptr) reducer_->no_sync_ = false;
}

}  // namespace dtl::lab04
