// What lab 04's tests share: the models at this lab's sizes, the single-process
// oracle, a DDP run of the same steps and backends by name. The model kinds, the
// batches and the comparison are every training lab's (harness/testing/
// training_fixtures.h, datasets/test_batches.h); the communicator that records what
// passes through it is harness/testing/recording_communicator.h.
//
// The equivalence the tests check: W ranks, each with B/W rows of a global batch
// of B, averaging gradients, take the same steps as one process with all B rows.
// The oracle runs inside every rank (on the full batch), so nothing but the
// code under test talks between ranks.
//
// Tolerance, and why it is not zero: the oracle's gradient sums B rows in one
// GEMM; DDP sums B/W rows per rank and then the W partial means in the
// allreduce. Float addition is not associative, so the two differ in the last
// bits (about 1e-7 relative per step); kSteps steps of SGD or AdamW keep that
// size (AdamW divides by sqrt(v) + eps, and no gradient of these models stays
// near zero for all of them). Hence kTolerance below, far above
// rounding and far below any real bug (a missing average is a factor W; a
// missing bucket leaves a rank's own gradient, off by O(1e-2)).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_batches.h"
#include "harness/comm/communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/testing/early_wait.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/recording_communicator.h"
#include "harness/testing/training_fixtures.h"
#include "lab04/ddp.h"

namespace lab04_test {

using dtl::testing::comm;
using dtl::testing::RecordingCommunicator;
namespace nn = dtl::nn;
namespace lab04 = dtl::lab04;

inline constexpr std::int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3, 4 (and 6)
inline constexpr int kSteps = 3;
inline constexpr double kAbsTolerance = 2e-5;     // |ddp - oracle| <= kAbsTolerance + kRelTolerance |oracle|
inline constexpr double kRelTolerance = 1e-4;

// The shared fixtures (harness/testing/training_fixtures.h, datasets/test_batches.h):
// kMlp, kGpt and kOddMlp (odd widths, 3 hidden layers) at this lab's sizes below.
using dtl::testing::Batch;
using dtl::testing::ModelKind;
using dtl::testing::OptKind;
using dtl::testing::model_name;
using dtl::testing::opt_name;
using dtl::data::testing::corpus;  // datasets/test_data.h: the same rows in every lab's tests
using dtl::data::testing::kContext;
using dtl::data::testing::make_batch;

// GPT sizes: the test corpus's vocabulary, kContext tokens of context.
inline constexpr std::int64_t kChannels = 16;

inline nn::Model make_model(ModelKind kind, std::uint64_t seed) {
  if (kind == ModelKind::kMlp) return nn::make_mlp(2, 24, 3, 2, seed);
  if (kind == ModelKind::kOddMlp) return nn::make_mlp(2, 7, 3, 3, seed);
  return nn::make_gpt(static_cast<std::int64_t>(corpus().vocab.size()), kContext, kChannels, 2, 2, seed);
}

/// SGD with momentum or AdamW over the whole flat buffer.
class Optimizer {
 public:
  Optimizer(OptKind kind, std::int64_t count) {
    if (kind == OptKind::kSgd) {
      sgd_ = std::make_unique<nn::Sgd>(nn::SgdOptions{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f}, count);
    } else {
      adam_ = std::make_unique<nn::AdamW>(nn::AdamWOptions{.lr = 1e-3f, .weight_decay = 0.01f}, count);
    }
  }
  void step(nn::Model& model) {
    auto params = model.flat_values().span<float>();
    auto grads = model.flat_grads().span<float>();
    if (sgd_) sgd_->step(params, grads);
    else adam_->step(params, grads);
  }

 private:
  std::unique_ptr<nn::Sgd> sgd_;
  std::unique_ptr<nn::AdamW> adam_;
};

/// Forward and backward of rows [begin, end) of step `step`; gradients are added.
inline void forward_backward(nn::Model& model, ModelKind kind, int step, std::int64_t begin, std::int64_t end) {
  nn::SoftmaxCrossEntropy ce;
  const Batch b = make_batch(kind, step, kGlobalBatch, begin, end);
  ce.forward(model.forward(b.x), b.y);
  model.backward(ce.backward());
}

/// The oracle: one process, the whole batch, kSteps steps, from `seed`'s initial parameters.
inline std::vector<float> single_process(ModelKind kind, OptKind opt, std::uint64_t seed, int micro_steps = 1) {
  nn::Model model = make_model(kind, seed);
  model.flatten_values();
  model.flatten_grads();
  Optimizer optimizer(opt, model.parameter_count());
  for (int step = 0; step < kSteps; ++step) {
    model.zero_grad();
    for (int m = 0; m < micro_steps; ++m) forward_backward(model, kind, step * micro_steps + m, 0, kGlobalBatch);
    optimizer.step(model);
  }
  const auto p = model.flat_values().span<float>();
  return {p.begin(), p.end()};
}

/// Buckets for the grading tests of the reducer (tasks C-H), worked out here, not
/// by the student's assign_buckets(): a fault in task B then costs task B's item
/// only. Reverse parameter order, greedy under the caps (the first bucket under
/// first_cap), a parameter above the cap alone: Note [Bucket order] in ddp_buckets.cc.
inline std::vector<std::vector<int>> reverse_buckets(nn::Model& model, std::size_t cap, std::size_t first_cap) {
  const auto params = model.parameters();
  std::vector<std::vector<int>> buckets;
  std::size_t filled = 0;  // bytes in the open bucket, buckets.back()
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const auto bytes = static_cast<std::size_t>(params[static_cast<std::size_t>(i)]->grad.bytes());
    const std::size_t limit = buckets.size() == 1 ? first_cap : cap;  // of the open bucket
    if (buckets.empty() || filled + bytes > limit) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  return buckets;
}

/// `options` with explicit buckets (reverse_buckets() under its caps) unless naive.
inline lab04::ReducerOptions with_buckets(nn::Model& model, lab04::ReducerOptions options) {
  if (options.mode != lab04::ReducerMode::kNaive && options.buckets.empty()) {
    options.buckets = reverse_buckets(model, options.bucket_cap_bytes, options.first_bucket_cap_bytes);
  }
  return options;
}

/// Options for a DDP run.
struct DdpRun {
  ModelKind model = ModelKind::kMlp;
  OptKind opt = OptKind::kSgd;
  lab04::ReducerOptions reducer = {.mode = lab04::ReducerMode::kOverlapped,
                                   .bucket_cap_bytes = 2048,
                                   .first_bucket_cap_bytes = 512};
  int micro_steps = 1;  // > 1: the first micro_steps - 1 inside no_sync()
};

/// The same steps with DDP over `backend`: every rank starts from a different seed
/// (so the broadcast matters), takes rows [rank b, (rank+1) b) of each global batch.
inline std::vector<float> ddp(dtl::Communicator& backend, const DdpRun& run, std::uint64_t seed) {
  const int rank = backend.rank(), size = backend.world_size();
  nn::Model model = make_model(run.model, seed + static_cast<std::uint64_t>(rank) * 1000);
  model.flatten_values();
  lab04::broadcast_parameters(backend, model, 0);
  lab04::Reducer reducer(backend, model, with_buckets(model, run.reducer));
  Optimizer optimizer(run.opt, model.parameter_count());
  const std::int64_t b = kGlobalBatch / size;
  for (int step = 0; step < kSteps; ++step) {
    model.zero_grad();
    for (int m = 0; m < run.micro_steps; ++m) {
      const int data_step = step * run.micro_steps + m;
      if (m + 1 < run.micro_steps) {
        auto scope = reducer.no_sync();
        forward_backward(model, run.model, data_step, rank * b, (rank + 1) * b);
      } else {
        forward_backward(model, run.model, data_step, rank * b, (rank + 1) * b);
      }
    }
    reducer.finish();
    optimizer.step(model);
  }
  const auto p = model.flat_values().span<float>();
  return {p.begin(), p.end()};
}

/// The parameters every run starts from (rank 0's model, which the broadcast hands to all).
inline std::vector<float> initial_parameters(ModelKind kind, std::uint64_t seed) {
  nn::Model model = make_model(kind, seed);
  const auto p = model.flatten_values().span<float>();
  return {p.begin(), p.end()};
}

/// When ddp's updates (got - initial) are a world-size multiple of the oracle's,
/// the classic mistakes: a sum never averaged, or an average taken twice. Empty
/// otherwise. The ratio is the least-squares fit of got's update to expected's.
inline std::string diagnose_factor(const std::vector<float>& initial, const std::vector<float>& expected,
                                   const std::vector<float>& got) {
  const int size = comm().size();
  if (size == 1 || initial.size() != got.size() || expected.size() != got.size()) return "";
  double dot = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = static_cast<double>(expected[i]) - initial[i];
    dot += (static_cast<double>(got[i]) - initial[i]) * want;
    norm += want * want;
  }
  if (norm == 0.0) return "";
  const double ratio = dot / norm;
  std::ostringstream hint;
  if (std::abs(ratio - size) < 0.1 * size) {
    hint << "\n---> HINT: the updates are about " << ratio << " times the single process's, off by a factor of W = "
         << size << ": is the average missing (the allreduce sums; divide by the world size once)?";
  } else if (std::abs(ratio - 1.0 / size) < 0.1 / size) {
    hint << "\n---> HINT: the updates are about 1/" << size << " of the single process's: is the average taken twice "
         << "(or are the local gradients divided by W before a sum that is divided again)?";
  }
  return hint.str();
}

/// ddp's parameters against the oracle's, within the stated tolerance. With the
/// runs' `initial` parameters, a failure also names a world-size factor (diagnose_factor()).
inline ::testing::AssertionResult close_to_oracle(const std::vector<float>& expected, const std::vector<float>& got,
                                                  const std::string& what, const std::vector<float>& initial = {}) {
  ::testing::AssertionResult result = dtl::testing::close_to(
      expected, got, what, {kAbsTolerance, kRelTolerance}, "the single-process run, batch " + std::to_string(kGlobalBatch));
  if (!result) result << diagnose_factor(initial, expected, got);
  return result;
}

// Note [Watching the buckets leave]: backward overlaps the allreduces only if each
// bucket leaves from the gradient hook that completes it and is not waited for
// there. The timing test (Overlap.BackwardRunsWhileABucketIsInFlight) misses a
// reducer that issues every bucket from the last gradient hook (the allreduces
// then span the end of unit 0's backward, and nothing else). So BucketWatch wraps
// the model's grad_ready hook and the backend: at each allreduce's issue it counts
// the gradients already ready below the bucket's range of the flat buffer (the
// later buckets' gradients: buckets go from its end to its start), and each
// bucket's Work is an EarlyWaitWork that is "too early" until backward has made
// another gradient ready (Note [A spin is a wait] in harness/testing/early_wait.h).
// The last gradient's bucket is exempt: backward is over with it.

/// A Communicator between the reducer and its backend that watches each allreduce's
/// issue and wait against the gradients backward has made ready (Note [Watching the
/// buckets leave]).
class BucketWatch final : public dtl::testing::WatchCommunicator {
 public:
  /// inner: the backend; model: the model whose grad_ready hook watch_gradients() wraps.
  BucketWatch(dtl::Communicator& inner, nn::Model& model) : WatchCommunicator(inner, "bucket watch"), model_(model) {}

  /// Call once the Reducer is made (it sets grad_ready): from here on gradients and allreduces are watched.
  void watch_gradients() {
    std::function<void(nn::Parameter&)> reducer_hook = model_.hooks().grad_ready;
    model_.hooks().grad_ready = [this, reducer_hook](nn::Parameter& p) {
      ready_.push_back(p.grad.data<float>());
      if (reducer_hook) reducer_hook(p);
    };
    flat_ = model_.flat_grads().data<float>();
    total_ = model_.parameters().size();
    issues.clear();
    ready_.clear();
    armed_ = true;
  }
  /// Call when backward has returned: waits from here on are finish()'s.
  void backward_done() { done_ = true; }

  struct Issue {
    std::ptrdiff_t offset = 0;  // the bucket's first element in the flat gradient buffer
    std::size_t count = 0;      // its elements
    int later_ready = 0;        // gradients below its range (later buckets') ready at the issue
    bool waited_early = false;  // waited for (or spun on) before backward made another gradient ready
  };
  std::vector<Issue> issues;

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    dtl::Work work = inner().allreduce(buf, info.count, info.dtype, info.op);
    if (!armed_) return passing(std::move(work), info);
    const auto* begin = static_cast<const float*>(buf);
    Issue issue{.offset = begin - flat_, .count = info.count};
    for (const float* g : ready_) issue.later_ready += g < begin ? 1 : 0;
    issues.push_back(issue);
    const std::size_t i = issues.size() - 1, seen = ready_.size();
    return std::make_unique<dtl::testing::EarlyWaitWork>(
        std::move(work), info, [this, seen] { return !done_ && ready_.size() == seen && seen < total_; },
        [this, i] { issues[i].waited_early = true; });
  }

 private:
  nn::Model& model_;
  const float* flat_ = nullptr;
  std::size_t total_ = 0;             // gradients in one backward
  std::vector<const float*> ready_;   // each ready gradient's first element, in hook order
  bool armed_ = false, done_ = false;
};

}  // namespace lab04_test
