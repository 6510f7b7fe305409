// Lab 09, task F, given: the dependency engine's runtime around your two tasks
// (src/engine.cc: push() and finish()); depend() records that `op` waits for `on`. A pool of threads takes ready operations,
// runs each and then its bookkeeping (finish()); the first exception an operation
// throws is kept and rethrown by the waits; waits are bounded and name the
// operations still unfinished; the destructor waits (bounded) and joins.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "harness/error.h"
#include "lab09/engine.h"

namespace dtl::lab09 {

void Engine::depend(const std::shared_ptr<Op>& op, const std::shared_ptr<Op>& on) {
  if (on == nullptr || on->finished || on == op) return;
  on->dependents.push_back(op);
  ++op->waiting;
}

Engine::Engine(int threads) {
  DTL_REQUIRE_ARG(threads >= 1, "Engine", "threads", "is " + std::to_string(threads) + "; at least 1");
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run_pool(); });
}

Engine::~Engine() {
  {
    // Bounded: an engine whose bookkeeping is broken must not hang its owner forever.
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait_for(lock, std::chrono::seconds(30), [this] { return all_.empty(); });
    stop_ = true;
  }
  ready_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Var Engine::new_var(std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  vars_.push_back(VarState{std::move(name), nullptr, {}});
  return static_cast<Var>(vars_.size()) - 1;
}

void Engine::run_pool() {
  while (true) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [this] { return stop_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stop_, nothing left
      op = ready_.front();
      ready_.erase(ready_.begin());
    }
    for (int part = 0; part < 2; ++part) {  // the operation, then its bookkeeping
      try {
        if (part == 0) {
          op->fn();
        } else {
          finish(op);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();  // the original type (e.g. StepFailed) is kept
      }
    }
  }
}

std::string Engine::unfinished_names(const std::vector<std::shared_ptr<Op>>& ops) const {
  std::string names;
  for (const std::shared_ptr<Op>& op : ops) {
    if (op->finished) continue;
    names += (names.empty() ? "" : ", ") + op->name + (op->waiting > 0 ? " (waiting for " +
                                                                          std::to_string(op->waiting) + " operations)"
                                                                    : " (ready or running)");
  }
  return names;
}

void Engine::wait_for(Var v, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  DTL_REQUIRE_ARG(v >= 0 && v < static_cast<Var>(vars_.size()), "Engine::wait_for", "v",
                  "names variable " + std::to_string(v) + "; there are " + std::to_string(vars_.size()));
  const VarState& var = vars_[static_cast<std::size_t>(v)];
  std::vector<std::shared_ptr<Op>> ops = var.readers;
  if (var.last_mutator) ops.push_back(var.last_mutator);
  const auto all_finished = [&] {
    return std::all_of(ops.begin(), ops.end(), [](const std::shared_ptr<Op>& op) { return op->finished; });
  };
  if (!done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), all_finished)) {
    throw TimeoutError("Engine::wait_for(" + var.name + "): after " + std::to_string(timeout_seconds) +
                       " s these operations had not finished: " + unfinished_names(ops));
  }
  if (error_) std::rethrow_exception(error_);
}
void Engine::wait_all(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [this] { return all_.empty(); })) {
    throw TimeoutError("Engine::wait_all: after " + std::to_string(timeout_seconds) +
                       " s these operations had not finished: " + unfinished_names(all_));
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace dtl::lab09
