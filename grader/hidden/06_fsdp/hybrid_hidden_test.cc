// Hidden tests for lab 06, task F (hybrid sharding), run at 5 and 6 ranks: every
// group size that divides P (5: G = 1 and 5; 6: G = 1, 2, 3 and 6), with a model
// whose units are smaller than some groups (shards of pure padding inside a
// group), prefetch 2, and a global batch of 30 rows. Oracles as in the public
// tests: one fp32 process, the vendor all-gather over the group, the replicas
// compared bit for bit, a recording communicator on each level, and the closed
// forms of Note [ZeRO stages] at W = G.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "labs/06_fsdp/tests/hybrid_test_util.h"

namespace lab06_test {
namespace {

using dtl::CollectiveKind;
using lab06::ShardingMode;
constexpr std::int64_t kRows = 30;

// Units of 3, 4 and 3 parameters (in 2, hidden 1, out 2, as the other hidden tests' tiny MLP).
nn::Model small_units(std::uint64_t seed) { return nn::make_mlp(2, 1, 3, 2, seed); }

struct HybridRun {
  const char* name;
  ModelKind kind;  // the data
  bool small;      // small_units() instead of make_model(kind)
  OptKind opt;
  int prefetch;
};

TEST(HiddenHybrid, EveryGroupSizeEqualsOneProcessWithEqualReplicas) {
  const int p = comm().size(), rank = comm().rank();
  const HybridRun runs[] = {{"gpt_adamw_p2", ModelKind::kGpt, false, OptKind::kAdamW, 2},
                      {"small_units_sgd_p1", ModelKind::kOddMlp, true, OptKind::kSgd, 1},
                      {"odd_mlp_adamw_p0", ModelKind::kOddMlp, false, OptKind::kAdamW, 0}};
  for (const HybridRun& run : runs) {
    auto model_of = [&](std::uint64_t seed) { return run.small ? small_units(seed) : make_model(run.kind, seed); };
    const std::vector<float> expected = single_process_of(model_of(9), run.kind, run.opt, kSteps, kRows);
    for (int g : divisors(p)) {
      HybridSetup h(g);
      const std::string what = std::string(run.name) + ", P " + std::to_string(p) + ", G " + std::to_string(g);
      nn::Model model = model_of(9 + static_cast<std::uint64_t>(rank) * 13);
      lab06::ShardedTrainer trainer(*h.hybrid, model,
                                    options_for(ShardingMode::kFsdp, run.opt, run.prefetch, test_layouts(model, g)));
      for (int step = 0; step < kSteps; ++step) {
        const Batch b = rank_batch(run.kind, step, kRows, rank, p);
        trainer.step(b.x, b.y);
      }
      const std::vector<float> got = gathered_parameters(trainer, h.group_mpi);
      EXPECT_TRUE(close_to(expected, got, what));
      std::vector<float> first = got;
      MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_FLOAT, 0, h.replica_mpi);
      EXPECT_EQ(first, got) << what << ": rank " << rank << "'s replica drifted from group 0's";
    }
  }
}

// Memory at W = G and what crosses groups, with units smaller than the group: the
// shards of padding cross too (4 N_G / G counts the padding), and nothing else does.
TEST(HiddenHybrid, MemoryAndCrossGroupBytesWithSmallUnits) {
  using C = nn::MemoryCategory;
  const int p = comm().size(), rank = comm().rank();
  for (int g : divisors(p)) {
    const int r = p / g;
    HybridSetup h(g);
    auto& tracker = nn::memory_tracker();
    const nn::MemorySnapshot before = tracker.snapshot();
    nn::Model model = small_units(4);
    const auto layouts = test_layouts(model, g);
    const Sizes s = sizes_of(layouts);
    const std::int64_t shard = s.n / g, units = static_cast<std::int64_t>(layouts.size());
    const std::string what = "small units, P " + std::to_string(p) + ", G " + std::to_string(g);
    lab06::ShardedTrainer trainer(*h.hybrid, model, options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, layouts));
    h.inside->clear();
    h.across->clear();
    tracker.reset_peak();
    const Batch b = rank_batch(ModelKind::kOddMlp, 0, kRows, rank, p);
    trainer.step(b.x, b.y);
    EXPECT_EQ(tracker.peak(C::kParameters) - before.current[static_cast<int>(C::kParameters)], 4 * shard + 4 * s.largest)
        << what;
    EXPECT_EQ(tracker.peak(C::kOptimizerState) - before.current[static_cast<int>(C::kOptimizerState)], 8 * shard)
        << what;
    EXPECT_EQ(h.inside->bytes(CollectiveKind::kReduceScatter), static_cast<std::size_t>(4 * s.n)) << what;
    EXPECT_EQ(h.across->ops().size(), static_cast<std::size_t>(r > 1 ? units : 0)) << what;
    EXPECT_EQ(h.across->bytes(CollectiveKind::kAllreduce), static_cast<std::size_t>(r > 1 ? 4 * shard : 0)) << what;
  }
}

}  // namespace
}  // namespace lab06_test
