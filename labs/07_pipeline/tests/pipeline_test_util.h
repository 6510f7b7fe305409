// What lab 07's tests share: the models at this lab's sizes, the single-process
// oracle (harness/nn only: no code under test), the test's own stage cuts and
// schedules. The model kinds, the batches and the tolerant comparison are every
// training lab's (harness/testing/training_fixtures.h, datasets/test_batches.h).
//
// The oracle runs inside every rank on the whole batch; the pipeline under test
// splits the model into the test's stages (never the student's balance_stages())
// and the batch into micro-batches. The schedules the executor runs are written
// here, independently of task B: GPipe as "all F, then all B", 1F1B as a greedy
// rule (run a forward while the stage holds fewer micro-batches than its cap and
// forwards remain, else a backward). The caps are not written down anywhere: they
// come from a search over simulated pipelines for what 1F1B achieves (GPipe's
// step time with the fewest micro-batches in flight; leanest_caps() in
// schedule_sim_util.h).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_batches.h"
#include "datasets/test_data.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/training_fixtures.h"
#include "lab07/pipeline.h"
#include "labs/07_pipeline/tests/schedule_sim_util.h"

namespace lab07_test {

using dtl::testing::comm;
namespace nn = dtl::nn;
namespace lab07 = dtl::lab07;
using lab07::Action;
using lab07::Pass;

// The shared fixtures (harness/testing/training_fixtures.h, datasets/test_batches.h);
// this lab sweeps kMlp and kGpt.
using dtl::testing::Batch;
using dtl::testing::close_to;  // |got - want| <= 2e-5 + 1e-4 |want|: see run_oracle()
using dtl::testing::ModelKind;
using dtl::testing::model_name;
using dtl::data::testing::corpus;  // datasets/test_data.h: the same rows in every lab's tests
using dtl::data::testing::kContext;
using dtl::data::testing::make_batch;

enum class Order { kGPipe, kOneFOneB };
inline const char* order_name(Order o) { return o == Order::kGPipe ? "gpipe" : "1f1b"; }

/// The models: `units` units each (MLP: fc0..fc{units-2}, head; GPT: embed, blocks, head), `width`
/// hidden features (MLP) or channels (GPT).
inline nn::Model make_model(ModelKind kind, std::uint64_t seed, int units = 5, std::int64_t width = 16) {
  if (kind == ModelKind::kMlp) return nn::make_mlp(2, width, 3, units - 1, seed);
  return nn::make_gpt(static_cast<std::int64_t>(corpus().vocab.size()), kContext, width, 2, units - 2, seed);
}

inline nn::Shape input_shape(ModelKind kind, std::int64_t rows) {
  return kind == ModelKind::kMlp ? nn::Shape{rows, 2} : nn::Shape{rows, kContext};
}

// SGD with momentum: its step is proportional to the gradient, so a gradient
// off by a factor (a missing rows/B, a micro-batch counted twice) shows.
inline const nn::SgdOptions kSgd{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f};

/// The test's cut: P contiguous stages of n units, as even as possible (the later stages get the extra units).
inline std::vector<int> even_cut(int units, int stages) {
  std::vector<int> bounds;
  for (int s = 0; s <= stages; ++s) bounds.push_back(s * units / stages);
  return bounds;
}

/// Stage s of `bounds` for a batch of `rows`: units and edge shapes (Model::activation_shapes, the harness).
inline nn::Stage stage_of(const nn::Model& whole, const std::vector<int>& bounds, int s, const nn::Shape& input) {
  const std::vector<nn::Shape> shapes = whole.activation_shapes(input);
  nn::Stage st;
  st.begin = bounds[static_cast<std::size_t>(s)];
  st.end = bounds[static_cast<std::size_t>(s) + 1];
  st.input_shape = shapes[static_cast<std::size_t>(st.begin)];
  st.output_shape = shapes[static_cast<std::size_t>(st.end)];
  return st;
}

/// Parameter values of units [begin, end), in forward order.
inline std::vector<float> unit_values(const nn::Model& model, int begin, int end) {
  std::vector<float> out;
  nn::Model& m = const_cast<nn::Model&>(model);
  for (int u = begin; u < end; ++u) {
    for (const nn::Parameter* p : m.unit(u).parameters()) {
      const auto s = p->value.span<float>();
      out.insert(out.end(), s.begin(), s.end());
    }
  }
  return out;
}

inline std::vector<float> values_of(const nn::Model& model) { return unit_values(model, 0, model.unit_count()); }

/// The oracle: one process, the whole model, the whole batch, `steps` SGD steps; the
/// model afterwards and the loss of each step. The pipeline's micro-batches sum the
/// rows in another order than the oracle's one GEMM: close_to()'s default tolerance.
struct Oracle {
  nn::Model model;
  std::vector<double> losses;
};
inline Oracle run_oracle(ModelKind kind, std::uint64_t seed, int steps, std::int64_t global, int units = 5,
                         std::int64_t width = 16) {
  Oracle o{make_model(kind, seed, units, width), {}};
  const std::vector<nn::Parameter*> params = o.model.parameters();
  const nn::Tensor values = nn::flatten_values(params);
  const nn::Tensor grads = nn::flatten_grads(params);
  nn::Sgd sgd(kSgd, values.numel());
  nn::SoftmaxCrossEntropy ce;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, global, 0, global);
    o.model.zero_grad();
    o.losses.push_back(ce.forward(o.model.forward(b.x), b.y));
    o.model.backward(ce.backward());
    sgd.step(values.span<float>(), grads.span<float>());
  }
  return o;
}

// ---------------------------------------------------------------------------
// The test's own schedules
// ---------------------------------------------------------------------------

/// "F0 F1 B0 B1" -> actions.
inline std::vector<Action> parse(const std::string& text) {
  std::vector<Action> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) out.push_back({word[0] == 'F' ? Pass::kForward : Pass::kBackward, std::stoi(word.substr(1))});
  return out;
}

inline std::string text(const std::vector<Action>& schedule) {
  std::string out;
  for (const Action& a : schedule) {
    out += (out.empty() ? "" : " ") + std::string(1, static_cast<char>(a.pass)) + std::to_string(a.micro_batch);
  }
  return out;
}

/// GPipe: every forward, then every backward.
inline std::vector<Action> gpipe_order(int /*stages*/, int /*stage*/, int m) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back({Pass::kForward, i});
  for (int i = 0; i < m; ++i) out.push_back({Pass::kBackward, i});
  return out;
}

/// 1F1B: the greedy order under the cap the search finds for this stage (schedule_sim_util.h).
inline std::vector<Action> one_f_one_b_order(int stages, int stage, int m) {
  return greedy_order(m, leanest_caps(stages, m)[static_cast<std::size_t>(stage)]);
}

inline std::vector<Action> order_of(Order o, int stages, int stage, int m) {
  return o == Order::kGPipe ? gpipe_order(stages, stage, m) : one_f_one_b_order(stages, stage, m);
}

// ---------------------------------------------------------------------------
// One pipeline, as the tests run it
// ---------------------------------------------------------------------------

/// This rank's stage of `kind` (the test's even cut over comm()), trained `steps` SGD steps.
struct PipelineRun {
  std::vector<float> values;         // this stage's parameters afterwards
  std::vector<double> losses;        // per step, on the last stage (0 elsewhere)
  std::vector<lab07::Event> events;  // of the last step
  int begin = 0, end = 0;            // the stage's units
};

inline PipelineRun run_pipeline(ModelKind kind, Order order, int m, int steps, std::int64_t global,
                                bool checkpoint = false, std::uint64_t seed = 3, int units = 5,
                                std::int64_t width = 16) {
  const int P = comm().size(), s = comm().rank();
  nn::Model whole = make_model(kind, seed, units, width);
  const std::vector<int> bounds = even_cut(units, P);
  const nn::Stage stage = stage_of(whole, bounds, s, input_shape(kind, global));
  nn::Model model = std::move(whole).slice(stage.begin, stage.end);
  const nn::Tensor values = model.flatten_values();
  const nn::Tensor grads = model.flatten_grads();
  nn::Sgd sgd(kSgd, values.numel());
  lab07::PipelineOptions options;
  options.micro_batches = m;
  options.checkpoint = checkpoint;
  lab07::PipelineStage pipe(comm(), std::move(model), stage, options);
  const std::vector<Action> schedule = order_of(order, P, s, m);
  PipelineRun run;
  run.begin = stage.begin;
  run.end = stage.end;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, global, 0, global);
    run.losses.push_back(pipe.train_step(b.x, b.y, schedule));
    sgd.step(values.span<float>(), grads.span<float>());
  }
  run.values = values_of(pipe.model());
  run.events = pipe.events();
  return run;
}


// ---------------------------------------------------------------------------
// The test's own naive pipeline (grid tests), and PipeDream's asynchronous run (stash tests)
// ---------------------------------------------------------------------------

// One naive pipeline step (m = 1) on the grid's pipeline communicator, written
// here: stage s receives its input from s - 1, sends its output to s + 1 and
// waits for the gradient back. A chain, so blocking sends cannot deadlock.
inline void naive_step(const dtl::Comm& pipe, nn::Model& model, const nn::Stage& stage, const Batch& b) {
  const int s = pipe.rank(), P = pipe.size();
  model.zero_grad();
  nn::Tensor in = b.x;
  if (s > 0) {
    in = nn::Tensor::zeros(stage.input_shape, nn::DType::kF32, nn::MemoryCategory::kOther);
    MPI_Recv(in.raw(), static_cast<int>(in.numel()), MPI_FLOAT, s - 1, 0, pipe, MPI_STATUS_IGNORE);
  }
  const nn::Tensor& y = model.forward(in);
  nn::SoftmaxCrossEntropy ce;
  nn::Tensor dy;
  if (s < P - 1) {
    MPI_Send(y.raw(), static_cast<int>(y.numel()), MPI_FLOAT, s + 1, 0, pipe);
    dy = nn::Tensor::zeros(stage.output_shape, nn::DType::kF32, nn::MemoryCategory::kOther);
    MPI_Recv(dy.raw(), static_cast<int>(dy.numel()), MPI_FLOAT, s + 1, 1, pipe, MPI_STATUS_IGNORE);
  } else {
    ce.forward(y, b.y);
    dy = ce.backward();
  }
  const nn::Tensor& dx = model.backward(dy);
  if (s > 0) MPI_Send(dx.raw(), static_cast<int>(dx.numel()), MPI_FLOAT, s - 1, 1, pipe);
}

inline std::vector<float> contents(const nn::Tensor& t) {
  const auto s = t.span<float>();
  return {s.begin(), s.end()};
}

// PipeDream: 1F1B without a flush, one SGD update per micro-batch right after its
// backward. The test's hooks copy the stage's weights when its first unit starts a
// forward and when its last unit starts a backward; the k-th forward (backward) the
// model runs is the k-th F (B) of the closed-form schedule.
struct AsyncRun {
  std::vector<std::vector<float>> forward_weights, backward_weights;  // per micro-batch
  std::vector<lab07::Event> events;
};

inline AsyncRun run_async(bool stash_on, int m, int units = 5) {
  const int P = comm().size(), s = comm().rank();
  constexpr std::int64_t kRows = 12;
  nn::Model whole = make_model(ModelKind::kMlp, 3, units);
  const nn::Stage stage = stage_of(whole, even_cut(units, P), s, input_shape(ModelKind::kMlp, kRows));
  nn::Model model = std::move(whole).slice(stage.begin, stage.end);
  const nn::Tensor values = model.flatten_values();
  const nn::Tensor grads = model.flatten_grads();
  nn::Sgd sgd({.lr = 0.1f}, values.numel());
  lab07::WeightStash stash(values);
  AsyncRun run;
  run.forward_weights.resize(static_cast<std::size_t>(m));
  run.backward_weights.resize(static_cast<std::size_t>(m));
  const std::vector<Action> schedule = one_f_one_b_order(P, s, m);
  std::vector<int> forward_order, backward_order;
  for (const Action& a : schedule) (a.pass == Pass::kForward ? forward_order : backward_order).push_back(a.micro_batch);
  const int last_unit = model.unit_count() - 1;
  std::size_t forwards = 0, backwards = 0;
  model.hooks().pre_forward = [&](int unit) {
    if (unit == 0 && forwards < forward_order.size()) {
      run.forward_weights[static_cast<std::size_t>(forward_order[forwards++])] = contents(values);
    }
  };
  model.hooks().pre_backward = [&](int unit) {
    if (unit == last_unit && backwards < backward_order.size()) {
      run.backward_weights[static_cast<std::size_t>(backward_order[backwards++])] = contents(values);
    }
  };
  lab07::PipelineOptions options;
  options.micro_batches = m;
  options.stash = stash_on ? &stash : nullptr;
  options.after_backward = [&](int) {
    sgd.step(values.span<float>(), grads.span<float>());
    grads.zero();
  };
  lab07::PipelineStage pipe(comm(), std::move(model), stage, options);
  const Batch b = make_batch(ModelKind::kMlp, 0, kRows, 0, kRows);
  pipe.train_step(b.x, b.y, schedule);
  run.events = pipe.events();
  return run;
}

}  // namespace lab07_test
