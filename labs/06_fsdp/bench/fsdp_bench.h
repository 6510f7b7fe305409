// Lab 06 benchmark, what two of its files share (one benchmark program, ./dtl bench 06;
// its third file, hybrid_bench.cc, task F's sweep of G on a two-level link, stands alone):
//   fsdp_bench.cc          the timed rows: Grade/fsdp+prefetch1/emulated (the graded
//                          row, See Note [The graded row] there) and Step/<backend>/<mode>;
//   fsdp_figures_bench.cc  what the rows' times do not show: the memory table against
//                          Note [ZeRO stages] (printed before the first Step row), and at
//                          the end the hidden share of communication, the Chrome traces
//                          and memory over one step (the slides' figures).
// Shared: the model and its data, the plain DDP step every mode is compared with, the
// modes, one rank's sharded trainer, and the backends by label.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/nn/tensor.h"
#include "lab06/fsdp.h"

namespace dtl::lab06::fsdp_bench {

namespace nn = dtl::nn;

inline constexpr std::int64_t kIn = 256, kHidden = 512, kClasses = 10;
inline constexpr int kDepth = 6;
inline constexpr std::int64_t kBatch = 32;         // rows per rank (memory table, mpi-thread rows)
inline constexpr std::int64_t kLinkBatch = 768;    // rows per rank on emulated 1GbE: compute about the link's time
inline const nn::AdamWOptions kAdamW{.lr = 1e-3f, .weight_decay = 0.0f};

inline nn::Model make_model() { return nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1); }

struct Data {
  nn::Tensor x, y;
};
/// This rank's batch: `batch` rows of N(0, 1) inputs and labels in [0, kClasses), seeded by rank.
Data make_data(std::int64_t batch = kBatch);

// The baseline: plain DDP, written here with harness pieces only.
struct Ddp {
  dtl::Communicator& comm_;
  nn::Model model = make_model();
  nn::Tensor values, grads;
  std::unique_ptr<nn::AdamW> adam;
  nn::SoftmaxCrossEntropy ce;
  Data data;
  double exposed = 0.0;
  explicit Ddp(dtl::Communicator& c, std::int64_t batch = kBatch) : comm_(c), data(make_data(batch)) {
    values = model.flatten_values();
    grads = model.flatten_grads();
    comm_.broadcast(values.span<float>(), 0).wait();
    adam = std::make_unique<nn::AdamW>(kAdamW, values.numel());
  }
  void step() {
    model.zero_grad();
    ce.forward(model.forward(data.x), data.y);
    model.backward(ce.backward());
    const double t0 = dtl::clock_seconds();
    comm_.allreduce(grads.span<float>(), dtl::ReduceOp::kAvg).wait();
    exposed = dtl::clock_seconds() - t0;
    adam->step(values.span<float>(), grads.span<float>());
  }
};

struct Mode {
  std::string name;
  bool ddp = false;
  lab06::ShardingMode mode = lab06::ShardingMode::kFsdp;
  int prefetch = 0;
  bool offload = false;
};
/// Every mode the memory table and the Step rows cover, DDP first.
const std::vector<Mode>& modes();

// One rank's sharded trainer with its own model and data.
struct Sharded {
  nn::Model model = make_model();
  Data data;
  std::unique_ptr<lab06::ShardedTrainer> trainer;
  lab06::StepResult last;
  Sharded(dtl::Communicator& c, const Mode& m, dtl::Timeline* timeline = nullptr,
          std::function<void(const char*, int)> observer = {}, std::int64_t batch = kBatch)
      : data(make_data(batch)) {
    lab06::ShardedOptions o;
    o.mode = m.mode;
    o.prefetch = m.prefetch;
    o.offload = m.offload;
    o.adamw = kAdamW;
    o.timeline = timeline;
    o.observer = std::move(observer);
    trainer = std::make_unique<lab06::ShardedTrainer>(c, model, o);
  }
  void step() { last = trainer->step(data.x, data.y); }
};

/// The communicator of a backend, made once per label: "mpi-thread" (real shared
/// memory) or an emulated link ("1GbE") over a real MPI backend.
dtl::Communicator& backend(const std::string& label);

/// The slowest rank's `seconds` (collective over the benchmark's communicator).
double slowest(double seconds);

/// The median exposed communication of each Step row, by "<backend label>/<mode>".
std::map<std::string, double>& exposed_by_row();

/// The memory table (fsdp_figures_bench.cc): per mode, the measured peaks of one step
/// against Note [ZeRO stages]. Collective; rank 0 prints.
void print_memory();

/// At the end (fsdp_figures_bench.cc): the share of communication prefetch hid, the
/// traces, memory over one step. Collective; rank 0 prints.
void report_after_rows();

}  // namespace dtl::lab06::fsdp_bench
