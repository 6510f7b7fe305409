// Lab 09, task C: one parameter server.
//
// What this file teaches: a server is an event loop. It never knows what comes
// next, so it receives from anyone (MPI_ANY_SOURCE, MPI_ANY_TAG), handles each
// message in arrival order, and keeps what it cannot answer yet (a pull that
// is too early) until the clocks move. Everything a consistency model decides
// happens in two places: when a step's update may be applied
// (apply_ready_steps()) and when a pull may be answered (answer_ready_pulls()).
//
// What each message must cause on server s (BSP/SSP), worker w, step t:
//
//     kPush(k, t)   nothing visible yet: step t's gradient of key k from w is kept
//     kClock(t)     w's clock becomes t + 1; every step that every live worker has
//                   now clocked past is applied, oldest first, as the mean of the
//                   gradients pushed for it (summed in worker order: deterministic)
//     kPull(k, c)   answered once may_read(c, version) allows it, in arrival order
//
// ASP applies each push on arrival (scaled by 1/W) and answers every pull at once.
// The kept gradients and the deferred pulls live in the members that
// lab09/parameter_server.h declares for them (pending_, deferred_).
// See Note [The protocol], Note [Consistency models] and Note [Silent workers]
// in lab09/parameter_server.h.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

// ---------------------------------------------------------------------------
// The loop
// ---------------------------------------------------------------------------

ServerReport ParameterServer::run() {
  const MPI_Comm comm = group_->comm();
  const int W = group_->workers();
  std::fill(last_heard_.begin(), last_heard_.end(), MPI_Wtime());
  std::fill(done_.begin(), done_.end(), false);
  // TODO(student): Serve until every worker is done or lost: receive every message from any worker and
  //   handle() it, and while no message is waiting complete finished sends, detect silent
  //   workers (find_lost_workers(MPI_Wtime())) and leave the cores to the workers (never
  //   spin, never block in a receive). Before leaving, give the replies still in flight up to
  //   the timeout to complete (complete_sends()); the code below deals with any left (Note
  //   [The protocol], Note [Silent workers], handout Task C).
  throw dtl::NotImplemented("ParameterServer::run");
  if (!send_requests_.empty()) {
    const std::size_t left = send_requests_.size();
    for (MPI_Request& r : send_requests_) MPI_Request_free(&r);  // MPI may still read the buffers:
    for (std::vector<std::byte>& b : send_buffers_) new std::vector<std::byte>(std::move(b));  // NOLINT: leaked
    send_requests_.clear();
    send_buffers_.clear();
    throw TimeoutError("server " + std::to_string(server_) + ": " + std::to_string(left) +
                       " replies were still not received by their workers " +
                       std::to_string(group_->options().timeout_seconds) + " s after every worker finished");
  }
  report_.version = version_;
  return report_;
}

void ParameterServer::on_push(int worker, const Message& m) {
  const int key = m.a, step = m.b;
  if (key < first_key_ || key >= end_key_ ||
      static_cast<std::int64_t>(m.values.size()) != group_->key_sizes()[static_cast<std::size_t>(key)]) {
    throw Error("server " + std::to_string(server_) + " (keys [" + std::to_string(first_key_) + ", " +
                std::to_string(end_key_) + ")): worker " + std::to_string(worker) + " pushed key " +
                std::to_string(key) + " with " + std::to_string(m.values.size()) + " floats");
  }
  events_.push_back({EventKind::kPush, worker, clock_.at(worker), version_, clock_.min(), key, step});
  if (report_.failed) return;  // BSP lost a worker: nothing is applied any more
  const std::int64_t begin = group_->key_offsets()[static_cast<std::size_t>(key)] - base_;
  // TODO(student): A worker's gradient for one key at step `step` (Note [Consistency models]). ASP:
  //   applied to the key's values at once, scaled by 1/W, through the key's optimizer sgd_,
  //   and logged as EventKind::kApply. BSP/SSP: not applied yet, only kept until the step is
  //   complete (a push for a step already applied throws, naming the worker, key and step);
  //   apply_ready_steps() applies it.
  throw dtl::NotImplemented("ParameterServer::on_push");
}

void ParameterServer::on_clock(int worker, const Message& m) {
  if (m.a != clock_.at(worker)) {
    throw Error("server " + std::to_string(server_) + ": worker " + std::to_string(worker) + " ended step " +
                std::to_string(m.a) + " but its clock is " + std::to_string(clock_.at(worker)));
  }
  // TODO(student): The worker finished a step: its clock moves by one (logged as EventKind::kClock with
  //   the new clock), and whatever that makes possible happens now: complete steps applied,
  //   waiting pulls answered (Note [Vector clock]).
  throw dtl::NotImplemented("ParameterServer::on_clock");
}

void ParameterServer::on_pull(int worker, const Message& m) {
  const int key = m.a, clock = m.b;
  if (key < first_key_ || key >= end_key_) {
    throw Error("server " + std::to_string(server_) + " (keys [" + std::to_string(first_key_) + ", " +
                std::to_string(end_key_) + ")): worker " + std::to_string(worker) + " pulled key " +
                std::to_string(key));
  }
  if (report_.failed) {
    reply_failed(worker, key, report_.error);
    return;
  }
  // TODO(student): Answer the pull now with reply() if VectorClock::may_read() allows it under this run's
  //   consistency model and staleness, else defer it until it may (handout Task C).
  throw dtl::NotImplemented("ParameterServer::on_pull");
}

void ParameterServer::apply_ready_steps() {
  // TODO(student): Bring version_ up to what the vector clock allows (Note [Vector clock]). ASP: version_
  //   follows the clock's minimum (pushes were applied on arrival). BSP/SSP: apply every step
  //   that every live worker has clocked past, oldest first: the mean of that step's
  //   gradients over the workers that pushed it (a lost worker's too if it did), summed in
  //   worker order so that the result is deterministic, one optimizer step per key; one
  //   EventKind::kApply per step with the new version.
  throw dtl::NotImplemented("ParameterServer::apply_ready_steps");
}

void ParameterServer::answer_ready_pulls() {
  // TODO(student): Answer (reply()) and remove every deferred pull that may_read() now allows; the others
  //   stay deferred, in arrival order.
  throw dtl::NotImplemented("ParameterServer::answer_ready_pulls");
}

void ParameterServer::find_lost_workers(double now) {
  const double timeout = group_->options().timeout_seconds;
  for (int w = 0; w < clock_.workers(); ++w) {
    const double silent = now - last_heard_[static_cast<std::size_t>(w)];
    // TODO(student): Lose (lose(w, silent)) a worker that is live, not done, not waiting on a pull at this
    //   server, and silent for longer than the timeout (Note [Silent workers]).
    throw dtl::NotImplemented("ParameterServer::find_lost_workers");
  }
}

void ParameterServer::lose(int worker, double silent_seconds) {
  // TODO(student): The worker is lost (Note [Silent workers]): the clock stops counting it, report_.lost
  //   records it and EventKind::kLost is logged with its clock. BSP cannot go on without it:
  //   set report_.failed and report_.error to a sentence naming the step (its clock), the
  //   worker, its rank, this server, the silence and why BSP cannot continue, and answer
  //   every deferred pull with reply_failed(). SSP/ASP go on: whatever the smaller set of
  //   live workers now allows happens (steps applied, pulls answered).
  throw dtl::NotImplemented("ParameterServer::lose");
}

}  // namespace dtl::lab09
