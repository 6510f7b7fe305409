// Lab 09, task D: the worker's side — push, pull, clock — and its training loop.
//
// What this file teaches: a worker is a client with deadlines. The answer to a
// pull may be late (the server defers it until the clocks allow) or never come
// (the server is gone), so a worker never blocks without a deadline, and when one
// passes it says what it was waiting for. A push never waits for the server.
//
// One step of worker w is Note [The protocol]'s: what the servers see, in that
// order, is the contract of train_worker(); how the pulls overlap the forward is
// task F's engine.
//
// Thread safety: the engine's threads call pull() at once for different keys. Each
// pull must receive its own reply and no other thread's, and whatever the worker
// keeps across calls (the sends in flight) must be safe to touch from several
// threads at once (handout Task D).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/loss.h"
#include "lab09/engine.h"
#include "lab09/parameter_server.h"
#include "worker_internals.h"

namespace dtl::lab09 {

void WorkerClient::push(int key, std::span<const float> grad) {
  const int keys = static_cast<int>(group_->key_sizes().size());
  DTL_REQUIRE_ARG(key >= 0 && key < keys, "WorkerClient::push", "key",
                  "is " + std::to_string(key) + "; it must be in [0, " + std::to_string(keys) + ")");
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(grad.size()) == group_->key_sizes()[static_cast<std::size_t>(key)],
                  "WorkerClient::push", "grad",
                  "has " + std::to_string(grad.size()) + " floats; key " + std::to_string(key) + " has " +
                      std::to_string(group_->key_sizes()[static_cast<std::size_t>(key)]));
  // TODO(student): Send this worker's gradient for `key` at its current clock to the key's server
  //   (server_of()) as a kPush Message (a = key, b = clock, values = grad) through send():
  //   nonblocking, from a copy, never waiting for the server (Note [The protocol], handout
  //   Task D).
  throw dtl::NotImplemented("WorkerClient::push");
}

int WorkerClient::pull(int key, std::span<float> out) {
  const int keys = static_cast<int>(group_->key_sizes().size());
  DTL_REQUIRE_ARG(key >= 0 && key < keys, "WorkerClient::pull", "key",
                  "is " + std::to_string(key) + "; it must be in [0, " + std::to_string(keys) + ")");
  const std::int64_t count = group_->key_sizes()[static_cast<std::size_t>(key)];
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(out.size()) == count, "WorkerClient::pull", "out",
                  "has " + std::to_string(out.size()) + " floats; key " + std::to_string(key) + " has " +
                      std::to_string(count));
  // TODO(student): Ask the key's server for `key` at this worker's clock (kPull, a = key, b = clock) and
  //   return once its reply is here: its values copied into `out`, its version returned.
  //   Never block in MPI_Recv; match only this key's reply from that server (other threads
  //   pull other keys at once). While waiting, keep every server aware that this worker is
  //   alive (heartbeats, Note [Silent workers]). Past 2 * PsOptions::timeout_seconds throw
  //   dtl::TimeoutError naming this worker, its rank, the server, the key and the clock; a
  //   kFailed reply throws StepFailed with its text (handout Task D).
  throw dtl::NotImplemented("WorkerClient::pull");
}

void WorkerClient::clock() {
  // TODO(student): Tell every server that this worker finished the step at its current clock (kClock, a =
  //   clock); the clock then moves on by one (Note [Vector clock]).
  throw dtl::NotImplemented("WorkerClient::clock");
}

void WorkerClient::finish() {
  if (finished_) return;
  finished_ = true;
  // TODO(student): Tell every server this worker is done (kDone), then return once every send of this
  //   worker has completed; past the timeout throw dtl::TimeoutError naming this worker and
  //   how many sends are left.
  throw dtl::NotImplemented("WorkerClient::finish");
}

// ---------------------------------------------------------------------------
// The training loop
// ---------------------------------------------------------------------------

TrainReport train_worker(WorkerClient& client, nn::Model& model, const BatchFn& batch, const TrainOptions& options) {
  const std::vector<nn::Parameter*> params = model.parameters();
  const PsGroup& group = client.group();
  DTL_REQUIRE_ARG(params.size() == group.key_sizes().size(), "train_worker", "model",
                  "has " + std::to_string(params.size()) + " parameter tensors; the group has " +
                      std::to_string(group.key_sizes().size()) + " keys");
  for (std::size_t k = 0; k < params.size(); ++k) {
    DTL_REQUIRE_ARG(params[k]->value.numel() == group.key_sizes()[k], "train_worker", "model",
                    "parameter " + std::to_string(k) + " has " + std::to_string(params[k]->value.numel()) +
                        " elements; key " + std::to_string(k) + " has " + std::to_string(group.key_sizes()[k]));
  }
  DTL_REQUIRE_ARG(options.steps >= 0 && options.threads >= 1, "train_worker", "options",
                  "need steps >= 0 and threads >= 1");
  // The keys of each unit: parameters are numbered unit by unit, in forward order.
  std::vector<std::vector<int>> unit_keys(static_cast<std::size_t>(model.unit_count()));
  for (int u = 0, k = 0; u < model.unit_count(); ++u) {
    for (std::size_t i = 0; i < model.unit(u).parameters().size(); ++i) unit_keys[static_cast<std::size_t>(u)].push_back(k++);
  }
  const double timeout = group.options().timeout_seconds;
  TrainReport report;
  nn::SoftmaxCrossEntropy ce;
  nn::Tensor x, y;
  std::unique_ptr<Engine> engine;
  std::vector<Var> vars;
  if (options.overlap) {
    engine = std::make_unique<Engine>(options.threads);
    for (std::size_t k = 0; k < params.size(); ++k) vars.push_back(engine->new_var("key " + std::to_string(k)));
  }
  std::mutex version_mutex;
  int min_version = INT_MAX;
  for (int i = 0; i < options.steps; ++i) {
    const int step = client.clock_value();
    if (options.silent_from_step >= 0 && step >= options.silent_from_step) return report;  // "dead": no finish()
    try {
      batch(step, x, y);
      min_version = INT_MAX;
      // TODO(student): One step at clock c = step, as the servers must see it (Note [The protocol], handout
      //   Task D): every key pulled into its parameter's value, then every key's gradient of
      //   this worker's rows (x, y), computed from those values, pushed tagged c, then c
      //   finished at every server. Afterwards report has this step's loss and the smallest
      //   version pulled (the engine's threads pull at once: no data race), one more step
      //   done. options.delay_seconds pass between the backward and the pushes (the tests'
      //   straggler). With options.overlap the pulls run on `engine` and unit u's forward
      //   starts once unit u's keys are in, not all keys; every wait ends by the timeout; the
      //   model's hooks are the caller's again on return, also when the step throws.
      //   Errors leave the block as they are: the code below reports a StepFailed and lets
      //   the others (dtl::TimeoutError) reach the caller.
      throw dtl::NotImplemented("train_worker");
    } catch (const StepFailed& e) {
      if (engine) {
        try {
          engine->wait_all(timeout);  // no operation may still use this step's buffers
        } catch (...) {
        }
      }
      report.error = e.what();
      break;
    }
  }
  client.finish();
  return report;
}

}  // namespace dtl::lab09
