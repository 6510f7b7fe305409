// Lab 06, given (not a task; compiled into both builds): the two lanes that run a
// HybridCommunicator's stages in order (TwoStageLanes in lab06/hybrid.h), and the
// communicator's name.
//
// Each lane is a CommThread: one thread, its calls run one at a time in the
// order they were queued. Stage one of an operation runs on the inside lane; when
// it has returned, the same thread queues stage two on the across lane. So stage
// twos are queued in the order of their stage ones, which is the issue order, on
// every rank. The Work the caller holds is a Completion that the last stage sets.
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "harness/comm/communicator.h"
#include "harness/error.h"
#include "lab06/hybrid.h"

namespace dtl::lab06 {

TwoStageLanes::TwoStageLanes(const std::string& name) : across_(name + " across"), inside_(name + " inside") {}

// Members are destroyed in reverse order: inside_ first (it runs what is queued,
// queueing the last stage twos), then across_ (it runs those).
TwoStageLanes::~TwoStageLanes() = default;

std::unique_ptr<WorkImpl> TwoStageLanes::submit(const std::string& description, std::function<void()> inside,
                                                std::function<void()> across) {
  DTL_REQUIRE_ARG(static_cast<bool>(inside), "TwoStageLanes::submit", "inside", "is empty");
  auto done = std::make_shared<detail::Completion>();
  const double issued = clock_seconds();
  // The lanes' own Works are dropped: `done` is what the caller waits for.
  inside_.submit(description + " (inside)", [this, done, issued, description, inside = std::move(inside),
                                             across = std::move(across)] {
    try {
      inside();
    } catch (...) {
      done->complete(std::current_exception(), issued);
      return;
    }
    if (!across) {
      done->complete(nullptr, issued);
      return;
    }
    across_.submit(description + " (across)", [done, issued, across] {
      try {
        across();
        done->complete(nullptr, issued);
      } catch (...) {
        done->complete(std::current_exception(), issued);
      }
    });
  });
  return detail::completion_work(description, done);
}

std::string HybridCommunicator::name() const {
  return "hybrid G=" + std::to_string(groups_.group_size) + " x R=" + std::to_string(groups_.replicas) +
         " (shard: " + shard_.name() + "; replicas: " + replica_.name() + ")";
}

}  // namespace dtl::lab06
