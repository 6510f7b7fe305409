// Hidden tests for lab 06 (an example set), run at 5 and 6 ranks. Oracles as in the
// public tests: the fp32 single-process run (of a global batch of 30 rows, divisible
// by 5 and 6), the closed forms of Note [ZeRO stages] worked out here, the vendor
// all-gather of the shards, and a checkpoint's contents written by the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;
constexpr std::int64_t kBatch30 = 30;

// Every mode, with prefetch, equals one process at 5 and 6 ranks (the odd MLP pads
// every unit at W = 5; the GPT's units at W = 6).
TEST(HiddenSharded, EveryModeEqualsOneProcess) {
  auto backend = mpi_backend(comm());
  const int rank = comm().rank(), size = comm().size();
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    const std::vector<float> expected = single_process(kind, OptKind::kAdamW, 11, kSteps, kBatch30);
    for (ShardingMode mode : {ShardingMode::kZero1, ShardingMode::kZero2, ShardingMode::kFsdp}) {
      nn::Model model = make_model(kind, 11 + static_cast<std::uint64_t>(rank) * 7);
      lab06::ShardedTrainer trainer(*backend, model, options_for(mode, OptKind::kAdamW, 1, test_layouts(model, size)));
      for (int step = 0; step < kSteps; ++step) {
        const Batch b = rank_batch(kind, step, kBatch30, rank, size);
        trainer.step(b.x, b.y);
      }
      EXPECT_TRUE(close_to(expected, gathered_parameters(trainer, comm()), std::string(lab06::sharding_mode_name(mode)) + " " + model_name(kind)));
    }
  }
}

// ZeRO-2 and FSDP's peak gradient and parameter bytes at 5 and 6 ranks: the closed form.
TEST(HiddenSharded, MemoryIsTheClosedForm) {
  using C = nn::MemoryCategory;
  auto backend = mpi_backend(comm());
  const int size = comm().size();
  for (ShardingMode mode : {ShardingMode::kZero2, ShardingMode::kFsdp}) {
    auto& tracker = nn::memory_tracker();
    const nn::MemorySnapshot before = tracker.snapshot();
    nn::Model model = make_model(ModelKind::kGpt, 1);
    const auto layouts = test_layouts(model, size);
    const Sizes s = sizes_of(layouts);
    const std::int64_t shard = s.n / size;
    lab06::ShardedTrainer trainer(*backend, model, options_for(mode, OptKind::kSgd, 0, layouts));
    tracker.reset_peak();
    const Batch b = rank_batch(ModelKind::kGpt, 0, kBatch30, comm().rank(), size);
    trainer.step(b.x, b.y);
    auto peak = [&](C c) { return tracker.peak(c) - before.current[static_cast<int>(c)]; };
    const std::string what = lab06::sharding_mode_name(mode);
    EXPECT_EQ(peak(C::kParameters), mode == ShardingMode::kFsdp ? 4 * shard + 4 * s.largest : 4 * s.n) << what;
    EXPECT_EQ(peak(C::kGradients), 4 * shard + 4 * s.largest) << what;
    EXPECT_EQ(peak(C::kOptimizerState), 4 * shard) << what;
  }
}

// CPU offload with prefetch 2 at 5 and 6 ranks: one process's parameters, and the
// host holds exactly the shards and the AdamW state (4S + 4S + 8S) while the
// device's optimizer bytes stay zero and its parameter and gradient peaks are those
// of three consecutive units (window_max, fsdp_test_util.h).
TEST(HiddenOffload, EqualsOneProcessWithShardsOnTheHost) {
  using C = nn::MemoryCategory;
  auto backend = mpi_backend(comm());
  const int rank = comm().rank(), size = comm().size();
  nn::MemoryTracker& host = nn::memory_tracker(nn::Device::kPinnedHost);
  nn::MemoryTracker& device = nn::memory_tracker(nn::Device::kCpu);
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    const std::vector<float> expected = single_process(kind, OptKind::kAdamW, 13, kSteps, kBatch30);
    const nn::MemorySnapshot host0 = host.snapshot(), dev0 = device.snapshot();
    nn::Model model = make_model(kind, 13 + static_cast<std::uint64_t>(rank) * 7);
    const auto layouts = test_layouts(model, size);
    const Sizes s = sizes_of(layouts);
    const std::int64_t shard = s.n / size;
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 2, layouts);
    o.offload = true;
    lab06::ShardedTrainer trainer(*backend, model, o);
    device.reset_peak();
    for (int step = 0; step < kSteps; ++step) {
      const Batch b = rank_batch(kind, step, kBatch30, rank, size);
      trainer.step(b.x, b.y);
    }
    const std::string what = std::string("offload ") + model_name(kind);
    EXPECT_TRUE(close_to(expected, gathered_parameters(trainer, comm()), what));
    auto host_now = [&](C c) { return host.current(c) - host0.current[static_cast<int>(c)]; };
    EXPECT_EQ(host_now(C::kParameters), 4 * shard) << what;
    EXPECT_EQ(host_now(C::kGradients), 4 * shard) << what;
    EXPECT_EQ(host_now(C::kOptimizerState), 8 * shard) << what;
    EXPECT_EQ(device.peak(C::kOptimizerState) - dev0.current[static_cast<int>(C::kOptimizerState)], 0) << what;
    // Prefetch 2: three consecutive units' full parameters and gradients at most, exactly.
    auto dev_peak = [&](C c) { return device.peak(c) - dev0.current[static_cast<int>(c)]; };
    EXPECT_EQ(dev_peak(C::kParameters), 4 * window_max(s.padded, 2)) << what << ": device parameter peak 4 W_2(L)";
    EXPECT_EQ(dev_peak(C::kGradients), 4 * window_max(s.padded, 2)) << what << ": device gradient peak 4 W_2(L)";
  }
}

// Saved at 5 or 6 ranks, loaded at 2, 3 and 4: resumed training stays within the
// tolerance of one process's whole run.
TEST(HiddenCheckpoint, SavedAtManyRanksResumesAtFewer) {
  const ModelKind kind = ModelKind::kGpt;
  ScratchDir dir;
  {
    auto backend = mpi_backend(comm());
    nn::Model model = make_model(kind, 4);
    lab06::ShardedTrainer trainer(*backend, model,
                                  options_for(ShardingMode::kFsdp, OptKind::kAdamW, 1, test_layouts(model, comm().size())));
    for (int step = 0; step < 2; ++step) {
      const Batch b = rank_batch(kind, step, kBatch30, comm().rank(), comm().size());
      trainer.step(b.x, b.y);
    }
    lab06::save_checkpoint(trainer, dir.path());
  }
  const std::vector<float> oracle = single_process(kind, OptKind::kAdamW, 4, 4, kBatch30);
  for (int w2 : {2, 3, 5}) {
    SubComm sub(w2);
    if (!sub.member()) continue;
    auto backend = mpi_backend(sub.get());
    nn::Model model = make_model(kind, 77);
    lab06::ShardedTrainer trainer(*backend, model,
                                  options_for(ShardingMode::kZero2, OptKind::kAdamW, 0, test_layouts(model, w2)));
    lab06::load_checkpoint(trainer, dir.path());
    for (int step = 2; step < 4; ++step) {
      const Batch b = rank_batch(kind, step, kBatch30, backend->rank(), w2);
      trainer.step(b.x, b.y);
    }
    EXPECT_TRUE(close_to(oracle, gathered_parameters(trainer, sub.get()),
                                "FSDP saved at W = " + std::to_string(comm().size()) + ", ZeRO-2 resumed at W' = " +
                                    std::to_string(w2)));
  }
}

}  // namespace
}  // namespace lab06_test
