// Tasks B and C: ZeRO-1, ZeRO-2 and FSDP against one fp32 process, the memory of
// Note [ZeRO stages] measured by the MemoryTracker against the closed form, the
// communication counted by a wrapper and by the PMPI tracer against the closed
// form, and the constructor's errors.
//
// Every test gives the trainer its layouts (options.layouts, worked out in
// fsdp_test_util.h), so a fault in task A costs task A's items only.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "harness/testing/mpi_tracer.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;
using dtl::CollectiveKind;

// ---------------------------------------------------------------------------
// Equivalence with one process
// ---------------------------------------------------------------------------

struct RunCase {
  ShardingMode mode;
  int prefetch;
  ModelKind model;
  OptKind opt;
};
std::string case_name(const RunCase& c) {
  return std::string(lab06::sharding_mode_name(c.mode)) + "_p" + std::to_string(c.prefetch) + "_" +
         model_name(c.model) + "_" + opt_name(c.opt);
}
void PrintTo(const RunCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<RunCase> all_cases(std::vector<std::pair<ShardingMode, int>> modes) {
  std::vector<RunCase> out;
  for (auto [mode, prefetch] : modes)
    for (ModelKind m : {ModelKind::kOddMlp, ModelKind::kGpt})
      for (OptKind o : {OptKind::kSgd, OptKind::kAdamW}) out.push_back({mode, prefetch, m, o});
  return out;
}

/// kSteps steps of the sharded trainer over `backend`; every rank starts from its own
/// seed (the constructor's broadcast must make them rank 0's). The gathered parameters.
std::vector<float> sharded_run(dtl::Communicator& backend, const RunCase& c, std::uint64_t seed) {
  const int rank = backend.rank(), size = backend.world_size();
  nn::Model model = make_model(c.model, seed + static_cast<std::uint64_t>(rank) * 1000);
  lab06::ShardedTrainer trainer(backend, model, options_for(c.mode, c.opt, c.prefetch, test_layouts(model, size)));
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = rank_batch(c.model, step, kGlobalBatch, rank, size);
    trainer.step(b.x, b.y);
  }
  return gathered_parameters(trainer, comm());
}

class Equivalence : public ::testing::TestWithParam<RunCase> {};

// W ranks in each mode end with the parameters of one process (MLP and GPT, SGD and
// AdamW, a parameter count not divisible by W), within the stated tolerance.
TEST_P(Equivalence, EqualsOneProcess) {
  const RunCase c = GetParam();
  const std::vector<float> expected = single_process(c.model, c.opt, 5);
  auto backend = mpi_backend(comm());
  const std::vector<float> got = sharded_run(*backend, c, 5);
  EXPECT_TRUE(close_to(expected, got, case_name(c)));
}

INSTANTIATE_TEST_SUITE_P(Zero, Equivalence,
                         ::testing::ValuesIn(all_cases({{ShardingMode::kZero1, 0}, {ShardingMode::kZero2, 0},
                                                        {ShardingMode::kZero2, 1}})),
                         [](const auto& p) { return case_name(p.param); });
INSTANTIATE_TEST_SUITE_P(Fsdp, Equivalence,
                         ::testing::ValuesIn(all_cases({{ShardingMode::kFsdp, 0}, {ShardingMode::kFsdp, 1},
                                                        {ShardingMode::kFsdp, 2}})),
                         [](const auto& p) { return case_name(p.param); });

// ---------------------------------------------------------------------------
// Memory: Note [ZeRO stages], measured
// ---------------------------------------------------------------------------

struct Expected {
  std::int64_t params = 0, grads = 0, optim = 0;
};

/// Note [ZeRO stages]'s peak bytes per category, prefetch 0, f32; state bytes per element 8 (AdamW) or 4 (SGD momentum).
Expected closed_form(ShardingMode mode, const Sizes& s, int world, int state_bytes) {
  const std::int64_t shard = s.n / world;
  switch (mode) {
    case ShardingMode::kZero1: return {4 * s.n, 4 * s.n, state_bytes * shard};
    case ShardingMode::kZero2: return {4 * s.n, 4 * shard + 4 * s.largest, state_bytes * shard};
    case ShardingMode::kFsdp: return {4 * shard + 4 * s.largest, 4 * shard + 4 * s.largest, state_bytes * shard};
  }
  return {};
}

class Memory : public ::testing::TestWithParam<std::tuple<ShardingMode, OptKind>> {};

// The peak parameter, gradient and optimizer bytes of this rank over two steps,
// from the MemoryTracker, equal the closed form exactly; the test prints both.
TEST_P(Memory, PeakBytesPerCategoryAreTheClosedForm) {
  const auto [mode, opt] = GetParam();
  using C = nn::MemoryCategory;
  auto backend = mpi_backend(comm());
  const int size = comm().size();
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    auto& tracker = nn::memory_tracker();
    const nn::MemorySnapshot before = tracker.snapshot();
    auto delta_peak = [&](C c) { return tracker.peak(c) - before.current[static_cast<int>(c)]; };
    auto delta_now = [&](C c) { return tracker.current(c) - before.current[static_cast<int>(c)]; };
    nn::Model model = make_model(kind, 1);
    const auto layouts = test_layouts(model, size);
    const Sizes s = sizes_of(layouts);
    const Expected want = closed_form(mode, s, size, opt == OptKind::kAdamW ? 8 : 4);
    {
      lab06::ShardedTrainer trainer(*backend, model, options_for(mode, opt, 0, layouts));
      tracker.reset_peak();
      for (int step = 0; step < 2; ++step) {
        const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), size);
        trainer.step(b.x, b.y);
      }
      const std::string what = std::string(lab06::sharding_mode_name(mode)) + " " + model_name(kind) + " " +
                               opt_name(opt) + " at W = " + std::to_string(size) + " (N = " + std::to_string(s.n) +
                               " padded, S = N/W = " + std::to_string(s.n / size) +
                               ", L = " + std::to_string(s.largest) + ")";
      EXPECT_EQ(delta_peak(C::kParameters), want.params) << what << ": peak parameter bytes";
      EXPECT_EQ(delta_peak(C::kGradients), want.grads) << what << ": peak gradient bytes";
      EXPECT_EQ(delta_peak(C::kOptimizerState), want.optim) << what << ": optimizer state bytes";
      // Between steps FSDP holds shards only, ZeRO-2 no full gradient.
      const std::int64_t shard = s.n / size;
      EXPECT_EQ(delta_now(C::kParameters), mode == ShardingMode::kFsdp ? 4 * shard : 4 * s.n) << what << ", between steps";
      EXPECT_EQ(delta_now(C::kGradients), mode == ShardingMode::kZero1 ? 4 * s.n : 4 * shard) << what << ", between steps";
      if (comm().rank() == 0) {
        std::printf("[ info ] %s: peak params %lld B (closed form %lld), grads %lld B (%lld), optimizer %lld B (%lld)\n",
                    what.c_str(), static_cast<long long>(delta_peak(C::kParameters)),
                    static_cast<long long>(want.params), static_cast<long long>(delta_peak(C::kGradients)),
                    static_cast<long long>(want.grads), static_cast<long long>(delta_peak(C::kOptimizerState)),
                    static_cast<long long>(want.optim));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Memory,
                         ::testing::Combine(::testing::Values(ShardingMode::kZero1, ShardingMode::kZero2,
                                                              ShardingMode::kFsdp),
                                            ::testing::Values(OptKind::kSgd, OptKind::kAdamW)),
                         [](const auto& p) {
                           return std::string(lab06::sharding_mode_name(std::get<0>(p.param))) + "_" +
                                  opt_name(std::get<1>(p.param));
                         });

// FSDP holds at most one full unit at a time without prefetch: after every
// post_forward and post_backward no unit is gathered, inside every pre_forward
// and pre_backward exactly one (read from the units' storages through the observer).
TEST(FsdpGatherAndFree, OneUnitGatheredAtATime) {
  auto backend = mpi_backend(comm());
  nn::Model model = make_model(ModelKind::kGpt, 1);
  lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, comm().size()));
  std::vector<std::string> problems;
  lab06::ShardedTrainer* self = nullptr;
  o.observer = [&](const char* phase, int u) {
    if (self == nullptr || u < 0) return;
    int gathered = 0;
    for (int v = 0; v < self->unit_count(); ++v) gathered += self->unit(v).full_values.storage()->is_allocated() ? 1 : 0;
    const bool pre = phase[1] == 'r';  // "pre_..."
    const bool own = self->unit(u).full_values.storage()->is_allocated();
    if ((pre && (gathered != 1 || !own)) || (!pre && gathered != 0)) {
      problems.push_back(std::string(phase) + "(" + std::to_string(u) + "): " + std::to_string(gathered) +
                         " units gathered" + (pre && !own ? ", not this one" : ""));
    }
  };
  lab06::ShardedTrainer trainer(*backend, model, o);
  self = &trainer;
  const Batch b = rank_batch(ModelKind::kGpt, 0, kGlobalBatch, comm().rank(), comm().size());
  trainer.step(b.x, b.y);
  EXPECT_TRUE(problems.empty()) << "rank " << comm().rank() << ": " << (problems.empty() ? "" : problems.front())
                                << " (" << problems.size() << " problems)";
}

// ---------------------------------------------------------------------------
// Communication: Note [ZeRO stages] and Note [Reduce-scatter, not allreduce]
// ---------------------------------------------------------------------------

class Communication : public ::testing::TestWithParam<ShardingMode> {};

// Per step: one reduce-scatter per unit of its padded gradient (4N bytes in all), one
// all-gather per unit (ZeRO-1/2: after the step) or two (FSDP: forward and backward),
// and no allreduce — counted by a wrapper around the backend and, for the MPI calls,
// by the PMPI tracer.
TEST_P(Communication, VolumeIsTheClosedFormWithoutAllreduce) {
  const ShardingMode mode = GetParam();
  auto inner = mpi_backend(comm());
  RecordingCommunicator counting(*inner);
  nn::Model model = make_model(ModelKind::kGpt, 1);
  const auto layouts = test_layouts(model, comm().size());
  const Sizes s = sizes_of(layouts);
  const int units = model.unit_count();
  lab06::ShardedTrainer trainer(counting, model, options_for(mode, OptKind::kAdamW, 0, layouts));
  const int gathers_per_unit = mode == ShardingMode::kFsdp ? 2 : 1;
  for (int step = 0; step < 2; ++step) {
    counting.clear();
    dtl::trace::reset_counts();
    const Batch b = rank_batch(ModelKind::kGpt, step, kGlobalBatch, comm().rank(), comm().size());
    trainer.step(b.x, b.y);
    const auto traced = dtl::trace::counts();
    const std::string what = std::string(lab06::sharding_mode_name(mode)) + ", step " + std::to_string(step) +
                             ", N = " + std::to_string(s.n) + " padded elements in " + std::to_string(units) + " units";
    EXPECT_EQ(counting.count(CollectiveKind::kReduceScatter), units) << what;
    EXPECT_EQ(counting.bytes(CollectiveKind::kReduceScatter), static_cast<std::size_t>(4 * s.n)) << what;
    EXPECT_EQ(counting.count(CollectiveKind::kAllgather), gathers_per_unit * units) << what;
    EXPECT_EQ(counting.bytes(CollectiveKind::kAllgather), static_cast<std::size_t>(gathers_per_unit * 4 * s.n)) << what;
    EXPECT_EQ(counting.count(CollectiveKind::kAllreduce), 0) << what << ": no allreduce (Note [Reduce-scatter, not allreduce])";
    EXPECT_EQ(counting.count(CollectiveKind::kBroadcast), 0) << what;
    EXPECT_EQ(traced.count("MPI_Allreduce") + traced.count("MPI_Iallreduce"), 0) << what << " (PMPI tracer)";
    if (comm().size() > 1) {
      EXPECT_EQ(traced.count("MPI_Reduce_scatter_block"), units) << what << " (PMPI tracer)";
      EXPECT_EQ(traced.count("MPI_Allgather"), gathers_per_unit * units) << what << " (PMPI tracer)";
    }
  }
  if (comm().rank() == 0) {
    std::printf("[ info ] %s at W = %d: per step %d reduce-scatters (%zu B), %d all-gathers (%zu B), 0 allreduces\n",
                lab06::sharding_mode_name(mode), comm().size(), counting.count(CollectiveKind::kReduceScatter),
                counting.bytes(CollectiveKind::kReduceScatter), counting.count(CollectiveKind::kAllgather),
                counting.bytes(CollectiveKind::kAllgather));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Communication,
                         ::testing::Values(ShardingMode::kZero1, ShardingMode::kZero2, ShardingMode::kFsdp),
                         [](const auto& p) { return std::string(lab06::sharding_mode_name(p.param)); });

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

// Each refusal names the argument, the unit where there is one, and the rank —
// the same on every rank, before any communication.
TEST(TrainerErrors, BadOptionsAreNamed) {
  auto backend = mpi_backend(comm());
  const std::string rank = "rank " + std::to_string(comm().rank());
  auto message = [&](auto&& make) -> std::string {
    try {
      make();
    } catch (const dtl::InvalidArgument& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "no exception";
  };
  {
    // A unit larger than the memory budget: "head" of the MLP has 24 elements = 96 bytes
    // at W = 1 (padded more at W > 1); fc1 has 56; a budget of 160 bytes refuses fc1 (224 B+).
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, comm().size()));
    o.max_unit_bytes = 160;
    const std::string m = message([&] { lab06::ShardedTrainer t(*backend, model, o); });
    EXPECT_NE(m.find("max_unit_bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("fc1"), std::string::npos) << "the message should name the unit: " << m;
    EXPECT_NE(m.find(rank), std::string::npos) << "the message should name the rank: " << m;
  }
  {
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, -1, test_layouts(model, comm().size()));
    const std::string m = message([&] { lab06::ShardedTrainer t(*backend, model, o); });
    EXPECT_NE(m.find("prefetch"), std::string::npos) << m;
  }
  {
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(ShardingMode::kZero2, OptKind::kAdamW, 0, test_layouts(model, comm().size()));
    o.param_dtype = nn::DType::kBF16;
    const std::string m = message([&] { lab06::ShardedTrainer t(*backend, model, o); });
    EXPECT_NE(m.find("param_dtype"), std::string::npos) << m;
  }
  for (nn::DType dtype : {nn::DType::kF32, nn::DType::kBF16}) {
    // Loss scaling is fp16's: f32 and bf16 would step on scaled gradients, so a scale is refused.
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, comm().size()));
    o.param_dtype = dtype;
    o.loss_scale = 1024.0f;
    const std::string m = message([&] { lab06::ShardedTrainer t(*backend, model, o); });
    EXPECT_NE(m.find("loss_scale"), std::string::npos) << m;
  }
  {
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    model.flatten_values();
    const std::string m = message([&] {
      lab06::ShardedTrainer t(*backend, model, options_for(ShardingMode::kFsdp, OptKind::kSgd, 0, {}));
    });
    EXPECT_NE(m.find("flattened"), std::string::npos) << m;
  }
  {
    // Layouts for another world size: named with the unit.
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kSgd, 0, test_layouts(model, comm().size() + 1));
    const std::string m = message([&] { lab06::ShardedTrainer t(*backend, model, o); });
    EXPECT_NE(m.find("layouts"), std::string::npos) << m;
    EXPECT_NE(m.find("fc0"), std::string::npos) << m;
  }
  // After all these refusals the backend still works: nothing was left half-issued.
  std::vector<float> v = {1.0f};
  backend->broadcast_blocking(std::span<float>(v), 0);
  EXPECT_EQ(v[0], 1.0f);
}

// The budget is inclusive: a unit of exactly max_unit_bytes is accepted, one element more is not.
TEST(TrainerErrors, BudgetIsInclusive) {
  auto backend = mpi_backend(comm());
  nn::Model model = make_model(ModelKind::kOddMlp, 1);
  const auto layouts = test_layouts(model, comm().size());
  lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, layouts);
  o.max_unit_bytes = 4 * sizes_of(layouts).largest;
  std::string error;
  try {
    lab06::ShardedTrainer trainer(*backend, model, o);
    const Batch b = rank_batch(ModelKind::kOddMlp, 0, kGlobalBatch, comm().rank(), comm().size());
    trainer.step(b.x, b.y);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "") << "a budget of exactly the largest unit (" << o.max_unit_bytes << " bytes) was refused";
  nn::Model other = make_model(ModelKind::kOddMlp, 1);
  o.max_unit_bytes -= 1;
  EXPECT_THROW(lab06::ShardedTrainer(*backend, other, o), dtl::InvalidArgument);
}

}  // namespace
}  // namespace lab06_test
