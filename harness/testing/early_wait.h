/// @file
/// @brief EarlyWaitWork: a Work, handed out by a test's Communicator wrapper, that
/// notices a wait (or a loop on test()) that comes before the overlap it should allow.
///
/// Note [A spin is a wait]: code that issues an operation and waits for it at once
/// leaves the link idle while it computes, and a loop on test() until it returns
/// true is the same wait. So, while the test says a wait would come too early (the
/// next chunk not issued yet, backward not gone on, the unit not computing yet),
/// test() answers "not yet" for its first kSpinPolls polls, then truly (so nothing
/// hangs). Code that polls now and then (to drive progress) loses nothing, since it
/// waits later anyway. Code that polls one operation kSpinPolls times in a row, with
/// no call on another watched operation in between, while it is too early, is
/// spinning on it, and is reported as having waited. Polls interleaved with calls on
/// other operations are not a spin on any one of them: a loop that waits for the
/// operation it needs and polls the others meanwhile leaves as soon as its own is
/// done, whatever the others do. A wait_for() whose deadline has already passed is a
/// poll, too. Labs 04, 06 and 08 use it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "harness/comm/communicator.h"

namespace dtl::testing {

/// @brief Forwards to an inner Work; a wait, or kSpinPolls polls in a row, while `too_early()`
/// holds calls `waited_early()` (Note [A spin is a wait]).
class EarlyWaitWork final : public dtl::WorkImpl {
 public:
  /// @brief Polls of test(), while too early, that make a spin.
  static constexpr int kSpinPolls = 1000;

  /// @brief Wraps `work`.
  /// @param[in] work the inner backend's Work.
  /// @param[in] info the operation (for its description).
  /// @param[in] too_early whether a wait now would come too early (empty: never).
  /// @param[in] waited_early called at each wait, and each poll from the kSpinPolls-th in a row on, while too early.
  EarlyWaitWork(dtl::Work work, const dtl::OpInfo& info, std::function<bool()> too_early = {},
                std::function<void()> waited_early = {})
      : dtl::WorkImpl(info.description),
        work_(std::move(work)),
        too_early_(std::move(too_early)),
        waited_early_(std::move(waited_early)) {}

  /// @brief "Not yet" while too early, for fewer than kSpinPolls polls; then the inner answer.
  /// @return whether the operation is complete.
  bool test() override {
    const std::uint64_t call = ++calls_;
    if (early()) {
      run_ = last_call_ + 1 == call ? run_ + 1 : 1;  // polls of this operation in a row
      last_call_ = call;
      if (run_ >= kSpinPolls) waited_early_();  // asked kSpinPolls times in a row while too early: a spin
      if (++polls_ < kSpinPolls) return false;
    }
    return work_.test();
  }

  /// @brief A poll if `deadline` has passed; otherwise a wait (reported if too early).
  /// @param[in] deadline clock_seconds() by which to give up.
  /// @return whether the operation is complete.
  bool wait_until(double deadline) override {
    if (deadline <= dtl::clock_seconds()) return test();  // wait_for(0): a poll
    ++calls_;
    if (early()) waited_early_();
    return work_.wait_for(std::max(0.0, deadline - dtl::clock_seconds()));
  }

 private:
  bool early() const { return too_early_ && too_early_(); }
  dtl::Work work_;
  std::function<bool()> too_early_;
  std::function<void()> waited_early_;
  int polls_ = 0;                   // polls while too early
  int run_ = 0;                     // of them, the last ones in a row
  std::uint64_t last_call_ = 0;     // calls_ at this operation's last poll
  static inline std::atomic<std::uint64_t> calls_{0};  // test() and wait calls on every EarlyWaitWork
};

/// @brief The base of a test's watch: a Communicator that forwards every operation to
/// `inner`, each Work an EarlyWaitWork that never finds a wait early. A watch derives
/// from it and overrides the operation(s) it watches (Note [A spin is a wait]).
class WatchCommunicator : public dtl::Communicator {
 public:
  /// @param[in] inner the backend, which must outlive the watch.
  /// @param[in] what the watch's name, for messages ("chunk watch").
  WatchCommunicator(dtl::Communicator& inner, std::string what) : inner_(inner), what_(std::move(what)) {}
  /// @return the inner backend's rank.
  int rank() const override { return inner_.rank(); }
  /// @return the inner backend's world size.
  int world_size() const override { return inner_.world_size(); }
  /// @return e.g. "chunk watch over mpi-thread".
  std::string name() const override { return what_ + " over " + inner_.name(); }

 protected:
  /// @return the backend every operation is forwarded to.
  dtl::Communicator& inner() const noexcept { return inner_; }
  /// @brief Wraps an operation's Work so that it passes through, unwatched.
  /// @param[in] work the inner backend's Work.
  /// @param[in] info the operation.
  /// @return the Work to hand back.
  static std::unique_ptr<dtl::WorkImpl> passing(dtl::Work work, const dtl::OpInfo& info) {
    return std::make_unique<EarlyWaitWork>(std::move(work), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    return passing(inner_.allreduce(buf, info.count, info.dtype, info.op), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_broadcast(void* buf, const dtl::OpInfo& info) override {
    return passing(inner_.broadcast(buf, info.count, info.dtype, info.root), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void* send, void* recv, const dtl::OpInfo& info) override {
    return passing(inner_.reduce_scatter(send, recv, info.count, info.dtype, info.op), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void* send, void* recv, const dtl::OpInfo& info) override {
    return passing(inner_.allgather(send, recv, info.count, info.dtype), info);
  }

 private:
  dtl::Communicator& inner_;
  std::string what_;
};

}  // namespace dtl::testing
