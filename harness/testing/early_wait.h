/// @file
/// @brief EarlyWaitWork: a Work, handed out by a test's Communicator wrapper, that
/// notices a wait (or a loop on test()) that comes before the overlap it should allow.
///
/// Note [A spin is a wait]: code that issues an operation and waits for it at once
/// leaves the link idle while it computes, and a loop on test() until it returns
/// true is the same wait. So, while the test says a wait would come too early (the
/// next chunk not issued yet, backward not gone on, the unit not computing yet),
/// test() answers "not yet" and counts the calls: code that polls now and then (to
/// drive progress) loses nothing, since it waits later anyway; code that asks
/// kSpinPolls times while it is too early is spinning, and is reported as having
/// waited (then answered truly, so it never hangs). A wait_for() whose deadline has
/// already passed is a poll, too. Labs 04, 06 and 08 use it.
#pragma once

#include <algorithm>
#include <functional>
#include <utility>

#include "harness/comm/communicator.h"

namespace dtl::testing {

/// @brief Forwards to an inner Work; a wait, or kSpinPolls polls, while `too_early()`
/// holds calls `waited_early()` (Note [A spin is a wait]).
class EarlyWaitWork final : public dtl::WorkImpl {
 public:
  /// @brief Polls of test(), while too early, that make a spin.
  static constexpr int kSpinPolls = 1000;

  /// @brief Wraps `work`.
  /// @param[in] work the inner backend's Work.
  /// @param[in] info the operation (for its description).
  /// @param[in] too_early whether a wait now would come too early (empty: never).
  /// @param[in] waited_early called at each wait, and each poll from the kSpinPolls-th on, while too early.
  EarlyWaitWork(dtl::Work work, const dtl::OpInfo& info, std::function<bool()> too_early = {},
                std::function<void()> waited_early = {})
      : dtl::WorkImpl(info.description),
        work_(std::move(work)),
        too_early_(std::move(too_early)),
        waited_early_(std::move(waited_early)) {}

  /// @brief "Not yet" while too early, for fewer than kSpinPolls polls; then the inner answer.
  /// @return whether the operation is complete.
  bool test() override {
    if (early()) {
      if (++polls_ < kSpinPolls) return false;
      waited_early_();  // asked kSpinPolls times while too early: a spin
    }
    return work_.test();
  }

  /// @brief A poll if `deadline` has passed; otherwise a wait (reported if too early).
  /// @param[in] deadline clock_seconds() by which to give up.
  /// @return whether the operation is complete.
  bool wait_until(double deadline) override {
    if (deadline <= dtl::clock_seconds()) return test();  // wait_for(0): a poll
    if (early()) waited_early_();
    return work_.wait_for(std::max(0.0, deadline - dtl::clock_seconds()));
  }

 private:
  bool early() const { return too_early_ && too_early_(); }
  dtl::Work work_;
  std::function<bool()> too_early_;
  std::function<void()> waited_early_;
  int polls_ = 0;
};

}  // namespace dtl::testing
