// What lab 09's tests share: the model and its data, the single-process SGD
// oracle (harness/nn only: no code under test), the test's own key shards, one
// whole parameter-server run on every rank with every error caught, the event
// log replayed into the test's own vector clock, and tolerant comparisons.
//
// Roles: ranks [0, S) serve, the rest work (Note [Roles and keys]). Worker w's
// rows at step t are rows [t B + w b, t B + (w + 1) b) of the spirals, b rows per
// worker and B = W b, so W workers under BSP see exactly the oracle's batch of B rows.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_data.h"
#include "harness/nn/layers.h"
#include "harness/nn/loss.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/training_fixtures.h"
#include "lab09/engine.h"
#include "lab09/parameter_server.h"

namespace lab09_test {

using dtl::testing::comm;
namespace nn = dtl::nn;
namespace lab09 = dtl::lab09;
using lab09::Consistency;

using dtl::data::testing::target_spirals;
inline constexpr std::int64_t kTrainRows = 2400;  // the last 600 rows are never trained on

/// The servers' timeout in runs where nobody is meant to go silent: far above any
/// step here (milliseconds), and well below the grader's 60 s per test, so that a
/// worker that stops with an exception is found lost (and named) by the servers
/// and the run ends with an error instead of the watchdog's report.
inline constexpr double kSafetyTimeout = 10.0;

/// The model: an MLP 2 -> width -> width -> 3 (units fc0, fc1, head; six keys).
inline nn::Model make_model(std::uint64_t seed = 3, std::int64_t width = 16) {
  return nn::make_mlp(2, width, 3, 2, seed);
}

// Note [The probe before unit 0]: pulls overlap the forward only if unit u's
// forward waits for unit u's keys, not every key. The result cannot tell (BSP's
// either way), so the overlap test gives the workers make_model() with a probe
// in front: a unit without parameters (so without keys: its forward need wait
// for nothing) that, at its first forward, counts the keys already pulled (the
// workers' parameters start as NaN, which a pull overwrites). The servers start
// serving only once every worker's probe has counted (a nonblocking barrier on a
// side communicator, which each probe enters after counting), or after
// kProbeWaitSeconds if some worker never gets there. A worker whose pulls overlap
// the forward reaches its probe with no pull answered, however slow the machine;
// one that waits for every pull first (or pulls one key at a time) reaches it
// only after the servers gave up waiting, with every key pulled.

/// How long the servers wait for every worker's probe before they serve anyway.
inline constexpr double kProbeWaitSeconds = 5.0;

/// A layer without parameters that passes x through and calls `at_first_forward` once,
/// at its first forward (Note [The probe before unit 0]).
class PullProbe final : public nn::Layer {
 public:
  PullProbe() : nn::Layer("probe") {}
  std::function<void()> at_first_forward;
  std::string kind() const override { return "PullProbe"; }
  const nn::Tensor& forward(const nn::Tensor& x) override {
    if (at_first_forward) std::exchange(at_first_forward, nullptr)();
    y_ = x;
    return y_;
  }
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn&) override {
    dx_ = dy;
    return dx_;
  }
  nn::Shape output_shape(const nn::Shape& input) const override { return input; }
  void release_slot(int) override {}

 private:
  nn::Tensor y_, dx_;
};

/// make_model() with a PullProbe as unit 0 (the same parameters, from the same seed); *probe: it.
inline nn::Model probed_model(PullProbe** probe, std::uint64_t seed = 3, std::int64_t width = 16) {
  nn::Model model;
  auto layer = std::make_unique<PullProbe>();
  *probe = layer.get();
  std::vector<std::unique_ptr<nn::Layer>> first;
  first.push_back(std::move(layer));
  model.add_unit("probe", std::move(first));
  nn::Model mlp = make_model(seed, width);
  dtl::Rng rng(seed);  // make_mlp()'s draws, in its order
  for (int u = 0; u < mlp.unit_count(); ++u) {
    std::vector<std::unique_ptr<nn::Layer>> layers;
    const bool head = u + 1 == mlp.unit_count();
    const std::string name = head ? "head" : "fc" + std::to_string(u);
    layers.push_back(std::make_unique<nn::Linear>(name, u == 0 ? 2 : width, head ? 3 : width, nn::DType::kF32, rng));
    if (!head) layers.push_back(std::make_unique<nn::ReLU>(name + ".relu"));
    model.add_unit(name, std::move(layers));
  }
  return model;
}

inline std::vector<std::int64_t> key_sizes_of(const nn::Model& model) {
  std::vector<std::int64_t> sizes;
  for (const nn::Parameter* p : model.parameters()) sizes.push_back(p->value.numel());
  return sizes;
}

inline std::vector<float> values_of(const nn::Model& model) {
  std::vector<float> out;
  for (const nn::Parameter* p : model.parameters()) {
    const auto s = p->value.span<float>();
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

inline void set_values(nn::Model& model, const std::vector<float>& values) {
  std::size_t at = 0;
  for (nn::Parameter* p : model.parameters()) {
    const auto s = p->value.span<float>();
    std::copy(values.begin() + static_cast<std::ptrdiff_t>(at),
              values.begin() + static_cast<std::ptrdiff_t>(at + s.size()), s.begin());
    at += s.size();
  }
}

/// Rows [first, first + rows) of the training rows (wrapping at kTrainRows).
inline void fill_rows(std::int64_t first, std::int64_t rows, nn::Tensor& x, nn::Tensor& y) {
  if (!x.defined() || x.shape()[0] != rows) {
    x = nn::Tensor::zeros({rows, 2}, nn::DType::kF32, nn::MemoryCategory::kOther);
    y = nn::Tensor::zeros({rows}, nn::DType::kI32, nn::MemoryCategory::kOther);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t row = (first + r) % kTrainRows;
    x.data<float>()[2 * r] = target_spirals().x[static_cast<std::size_t>(2 * row)];
    x.data<float>()[2 * r + 1] = target_spirals().x[static_cast<std::size_t>(2 * row + 1)];
    y.data<std::int32_t>()[r] = target_spirals().y[static_cast<std::size_t>(row)];
  }
}

/// Worker w's batch function: b rows per worker, W workers.
inline lab09::BatchFn worker_batches(int worker, int workers, std::int64_t rows) {
  return [=](int step, nn::Tensor& x, nn::Tensor& y) {
    fill_rows(static_cast<std::int64_t>(step) * rows * workers + worker * rows, rows, x, y);
  };
}

/// The oracle: one process, the whole batch of B rows per step, nn::Sgd over the flat values.
inline std::vector<float> run_oracle(int steps, std::int64_t global_rows, const nn::SgdOptions& sgd_options,
                                     std::uint64_t seed = 3) {
  nn::Model model = make_model(seed);
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params);
  const nn::Tensor grads = nn::flatten_grads(params);
  nn::Sgd sgd(sgd_options, values.numel());
  nn::SoftmaxCrossEntropy ce;
  nn::Tensor x, y;
  for (int step = 0; step < steps; ++step) {
    fill_rows(static_cast<std::int64_t>(step) * global_rows, global_rows, x, y);
    model.zero_grad();
    ce.forward(model.forward(x), y);
    model.backward(ce.backward());
    sgd.step(values.span<float>(), grads.span<float>());
  }
  return values_of(model);
}

/// Held-out accuracy of a model with these flat values (the last 600 rows).
inline double accuracy_of(const std::vector<float>& values) {
  nn::Model model = make_model();
  set_values(model, values);
  const std::int64_t rows = 600;
  nn::Tensor x = nn::Tensor::zeros({rows, 2}, nn::DType::kF32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({rows}, nn::DType::kI32, nn::MemoryCategory::kOther);
  dtl::data::copy_rows(target_spirals(), kTrainRows, x.span<float>(), y.span<std::int32_t>());
  nn::SoftmaxCrossEntropy ce;
  ce.forward(model.forward(x), y);
  return static_cast<double>(ce.correct()) / static_cast<double>(rows);
}

/// The test's own shard: S ranges of (nearly) equal key counts, never shard_keys().
inline std::vector<int> even_bounds(int keys, int servers) {
  std::vector<int> b;
  for (int s = 0; s <= servers; ++s) b.push_back(s * keys / servers);
  return b;
}

/// What one rank did in a run.
struct PsRun {
  bool server = false;
  int workers = 0;
  std::vector<float> values;             // server: its range after run()
  std::int64_t first = 0;                // server: where its range starts in the flat buffer
  lab09::ServerReport report;            // server
  std::vector<lab09::Event> events;      // server
  lab09::TrainReport train;              // worker
  std::string error;                     // any exception, with its text
  std::vector<std::byte> checkpoint;     // server, when asked for
  int pulled_at_probe = -1;              // worker, with RunSpec::probe_pulls: keys pulled when unit 0's forward began
};

/// Per worker: its TrainOptions (the default: `steps`, no delay, no fault).
using WorkerSetup = std::function<lab09::TrainOptions(int worker)>;

struct RunSpec {
  lab09::PsOptions options;
  int steps = 5;
  std::int64_t rows = 8;                          // b, per worker
  WorkerSetup setup;                              // empty: every worker TrainOptions{steps}, overlap off
  int start_clock = 0;                            // a restored run's clock
  const std::vector<std::byte>* restore = nullptr;  // server: restore() this first (its own rank's)
  bool take_checkpoint = false;
  bool probe_pulls = false;  // Note [The probe before unit 0]: the probed model; servers serve once it counted
};

/// One parameter-server run on comm(): every rank builds the same model, servers
/// serve, workers train. Every exception is caught and kept (no rank leaves early).
inline PsRun run_ps(const RunSpec& spec) {
  PsRun run;
  PullProbe* probe = nullptr;
  nn::Model model = spec.probe_pulls ? probed_model(&probe) : make_model();
  const std::vector<std::int64_t> sizes = key_sizes_of(model);
  // Note [The probe before unit 0]: one nonblocking barrier on a side communicator,
  // entered by each worker's probe after it counted and by each server before it serves.
  MPI_Comm side = MPI_COMM_NULL;
  MPI_Request probed = MPI_REQUEST_NULL;
  bool entered = false;
  auto enter = [&] {
    if (side != MPI_COMM_NULL && !entered) DTL_MPI_CHECK(MPI_Ibarrier(side, &probed));
    entered = true;
  };
  if (spec.probe_pulls) DTL_MPI_CHECK(MPI_Comm_dup(comm(), &side));
  try {
    lab09::PsGroup group(comm(), spec.options, sizes,
                         even_bounds(static_cast<int>(sizes.size()), spec.options.servers));
    run.workers = group.workers();
    if (group.is_server()) {
      run.server = true;
      const std::vector<float> initial = values_of(model);
      lab09::ParameterServer server(group, initial);
      if (spec.restore != nullptr) server.restore(*spec.restore);
      if (spec.probe_pulls) {  // serve once every worker's probe has counted, or after kProbeWaitSeconds
        enter();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kProbeWaitSeconds);
        for (int done = 0; done == 0 && std::chrono::steady_clock::now() < deadline;) {
          DTL_MPI_CHECK(MPI_Test(&probed, &done, MPI_STATUS_IGNORE));
          if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      run.report = server.run();
      run.values.assign(server.values().begin(), server.values().end());
      run.first = group.key_offsets()[static_cast<std::size_t>(group.bounds()[static_cast<std::size_t>(comm().rank())])];
      run.events = server.events();
      if (spec.take_checkpoint) run.checkpoint = server.checkpoint();
    } else {
      lab09::TrainOptions t;
      t.steps = spec.steps;
      t.overlap = false;
      if (spec.setup) t = spec.setup(group.worker_index());
      if (probe != nullptr) {  // every parameter NaN until pulled; the probe counts the pulled ones
        const std::vector<nn::Parameter*> params = model.parameters();
        for (nn::Parameter* p : params) {
          for (float& v : p->value.span<float>()) v = std::numeric_limits<float>::quiet_NaN();
        }
        probe->at_first_forward = [&run, &enter, params] {
          run.pulled_at_probe = 0;
          for (const nn::Parameter* p : params) {
            const auto v = p->value.span<float>();
            run.pulled_at_probe += std::none_of(v.begin(), v.end(), [](float e) { return std::isnan(e); }) ? 1 : 0;
          }
          enter();  // counted: the servers may serve now
        };
      }
      lab09::WorkerClient client(group, spec.start_clock);
      run.train = lab09::train_worker(client, model,
                                      worker_batches(group.worker_index(), group.workers(), spec.rows), t);
    }
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  if (side != MPI_COMM_NULL) {  // a rank that never reached its probe (an exception) enters now
    enter();
    DTL_MPI_CHECK(MPI_Wait(&probed, MPI_STATUS_IGNORE));
    DTL_MPI_CHECK(MPI_Comm_free(&side));
  }
  return run;
}

/// The whole model's values after a run, on every rank (collective): the servers' ranges in order.
inline std::vector<float> gather_values(const PsRun& run, std::int64_t total) {
  std::vector<float> mine(static_cast<std::size_t>(total), 0.0f);
  if (run.server && run.error.empty() && run.first + static_cast<std::int64_t>(run.values.size()) <= total) {
    std::copy(run.values.begin(), run.values.end(), mine.begin() + run.first);
  }
  std::vector<float> all(mine.size());
  DTL_MPI_CHECK(MPI_Allreduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_FLOAT, MPI_SUM, comm()));
  return all;  // each element has exactly one nonzero contributor: the sum is exact
}

/// |got - want| <= 2e-5 + 1e-4 |want| elementwise (dtl::testing::close_to()), naming the
/// first element that is not by its index in the flat model (`offset`: got[0]'s).
inline ::testing::AssertionResult close_to(const std::vector<float>& want, const std::vector<float>& got,
                                           const std::string& what, std::int64_t offset = 0) {
  return dtl::testing::close_to(want, got, what + ", the flat model", {}, "one process, SGD on the whole batch",
                                offset);
}

/// The oracle's part for one server's range.
inline std::vector<float> slice(const std::vector<float>& all, std::int64_t first, std::size_t count) {
  return std::vector<float>(all.begin() + first, all.begin() + first + static_cast<std::ptrdiff_t>(count));
}

/// Replays a server's log with the test's own vector clock and checks, at every
/// answered pull, that the reader's clock is at most `bound` ahead of the slowest
/// live worker (bound < 0: no check), that the version answered is the number of
/// steps applied so far, and that no clock goes backwards or skips.
inline ::testing::AssertionResult log_respects_bound(const std::vector<lab09::Event>& events, int workers, int bound,
                                                     int start_clock = 0) {
  std::vector<int> clock(static_cast<std::size_t>(workers), start_clock);
  std::vector<bool> lost(static_cast<std::size_t>(workers), false);
  int applied = start_clock, pulls = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const lab09::Event& e = events[i];
    const std::string at = "rank " + std::to_string(comm().rank()) + ": event " + std::to_string(i) + " of the log";
    if (e.worker >= workers) return ::testing::AssertionFailure() << at << " names worker " << e.worker;
    switch (e.kind) {
      case lab09::EventKind::kClock:
        if (e.clock != clock[static_cast<std::size_t>(e.worker)] + 1) {
          return ::testing::AssertionFailure() << at << ": worker " << e.worker << "'s clock went from "
                                               << clock[static_cast<std::size_t>(e.worker)] << " to " << e.clock;
        }
        clock[static_cast<std::size_t>(e.worker)] = e.clock;
        break;
      case lab09::EventKind::kLost: lost[static_cast<std::size_t>(e.worker)] = true; break;
      case lab09::EventKind::kApply: ++applied; break;
      case lab09::EventKind::kPull: {
        ++pulls;
        int slowest = -1;
        for (int w = 0; w < workers; ++w) {
          if (!lost[static_cast<std::size_t>(w)] && (slowest < 0 || clock[static_cast<std::size_t>(w)] < slowest)) {
            slowest = clock[static_cast<std::size_t>(w)];
          }
        }
        if (bound >= 0 && slowest >= 0 && e.clock - slowest > bound) {
          return ::testing::AssertionFailure()
                 << at << ": worker " << e.worker << " at clock " << e.clock << " got key " << e.key
                 << " while the slowest worker's clock was " << slowest << " (" << e.clock - slowest
                 << " steps ahead; the bound is " << bound << ")";
        }
        if (bound >= 0 && e.version != applied) {
          return ::testing::AssertionFailure() << at << ": a pull was answered with version " << e.version
                                               << " after " << applied << " applied steps";
        }
        if (bound >= 0 && e.clock - e.version > bound) {
          return ::testing::AssertionFailure() << at << ": worker " << e.worker << " at clock " << e.clock
                                               << " got version " << e.version << " (" << e.clock - e.version
                                               << " steps stale; the bound is " << bound << ")";
        }
        break;
      }
      case lab09::EventKind::kPush: break;
    }
  }
  if (pulls == 0) return ::testing::AssertionFailure() << "rank " << comm().rank() << ": the log has no answered pull";
  return ::testing::AssertionSuccess();
}

/// Skips a parameter-server test at one rank (there is no parameter server; PsErrors covers it).
#define LAB09_NEEDS_TWO_RANKS()                                                               \
  do {                                                                                        \
    if (comm().size() < 2) GTEST_SKIP() << "a parameter server needs 2 ranks (PsErrors checks 1)"; \
  } while (0)

/// Server counts to try at this rank count: 1, and 2 when a worker is left.
inline std::vector<int> server_counts() {
  std::vector<int> s{1};
  if (comm().size() >= 3) s.push_back(2);
  return s;
}

}  // namespace lab09_test
