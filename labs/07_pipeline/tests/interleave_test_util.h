// What lab 07's interleaving tests share (task F), beside the schedule model of
// schedule_sim_util.h (check_order(), peak_in_flight(), simulate(), written from
// Note [Interleaving]'s definitions, never from interleaved_schedule()):
//
//   - run_interleaved(): the chunks of this rank (the test's even cut of the
//     model into v P virtual stages) trained by InterleavedStage; run_schedule()
//     the same with any schedule (task G's ZB-H1, the test's 1F1B).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab07/interleave.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {

/// This rank's chunks of `kind` (the test's even cut into v P virtual stages, chunk c
/// = virtual stage c P + rank), trained `steps` SGD steps by InterleavedStage.
struct InterleavedRun {
  std::vector<std::vector<float>> values;  // per chunk, afterwards
  std::vector<std::pair<int, int>> units;  // per chunk: [begin, end)
  std::vector<double> losses;              // per step, on rank P - 1 (0 elsewhere)
  std::int64_t messages = 0;               // sent by this rank in the last step
  std::int64_t peak_activations = 0;       // this rank's peak kActivations bytes in the last step
};

/// run_interleaved() with this rank's `schedule` given.
inline InterleavedRun run_schedule(ModelKind kind, int v, int m, int steps, std::int64_t global, int units,
                                   const std::vector<Action>& schedule, std::uint64_t seed = 3,
                                   std::int64_t width = 16) {
  const int P = comm().size(), s = comm().rank();
  const std::vector<int> bounds = even_cut(units, v * P);
  std::vector<nn::Model> chunks;
  std::vector<nn::Stage> stages;
  InterleavedRun run;
  for (int c = 0; c < v; ++c) {
    nn::Model whole = make_model(kind, seed, units, width);  // the same seed: the same weights
    const nn::Stage st = stage_of(whole, bounds, c * P + s, input_shape(kind, global));
    chunks.push_back(std::move(whole).slice(st.begin, st.end));
    stages.push_back(st);
    run.units.emplace_back(st.begin, st.end);
  }
  std::vector<nn::Tensor> values, grads;
  std::vector<nn::Sgd> sgds;
  for (nn::Model& model : chunks) {
    values.push_back(model.flatten_values());
    grads.push_back(model.flatten_grads());
    sgds.emplace_back(kSgd, values.back().numel());
  }
  lab07::InterleavedStage pipe(comm(), std::move(chunks), stages, m);
  auto& tracker = nn::memory_tracker();
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, global, 0, global);
    const std::int64_t before = tracker.current(nn::MemoryCategory::kActivations);
    tracker.reset_peak();
    run.losses.push_back(pipe.train_step(b.x, b.y, schedule));
    run.peak_activations = tracker.peak(nn::MemoryCategory::kActivations) - before;
    for (int c = 0; c < v; ++c) {
      const auto k = static_cast<std::size_t>(c);
      sgds[k].step(values[k].span<float>(), grads[k].span<float>());
    }
  }
  for (int c = 0; c < v; ++c) run.values.push_back(values_of(pipe.model(c)));
  run.messages = pipe.messages_sent();
  return run;
}

inline InterleavedRun run_interleaved(ModelKind kind, int v, int m, int steps, std::int64_t global, int units,
                                      std::uint64_t seed = 3, std::int64_t width = 16) {
  const std::vector<Action> schedule = lab07::interleaved_schedule(comm().size(), comm().rank(), m, v);
  return run_schedule(kind, v, m, steps, global, units, schedule, seed, width);
}

// A schedule function's argument check: `call` throws dtl::InvalidArgument naming `argument`.
inline void expect_invalid(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no dtl::InvalidArgument naming '" << argument << "'";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
  }
}

}  // namespace lab07_test
