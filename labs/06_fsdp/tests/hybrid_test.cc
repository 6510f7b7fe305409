// Task F: hybrid sharding (Note [Hybrid sharding] in lab06/hybrid.h), at every
// group size G that divides P: G = 1 (DDP: every rank a replica) and G = P (FSDP:
// one group, nothing crosses) included.
//
// Oracles: hand-worked groups and the partition they must form; the vendor
// collectives (MPI_Allreduce, MPI_Allgather, MPI_Bcast over all ranks) for what
// each hybrid collective must leave in the buffers; a recording communicator on
// each level, the group's and the replica set's (hybrid_test_util.h), for what
// crosses groups; the single fp32 process for training; the closed forms of
// Note [ZeRO stages] at W = G for memory, and the Note's traffic as functions of G.
// The communicators are split by the test's own arithmetic, so a fault in
// make_hybrid_groups() costs item F1 only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "labs/06_fsdp/tests/hybrid_test_util.h"

namespace lab06_test {
namespace {

using ::testing::HasSubstr;
using dtl::CollectiveKind;
using lab06::ShardingMode;

// ---------------------------------------------------------------------------
// F1. make_hybrid_groups
// ---------------------------------------------------------------------------

TEST(HybridGroups, HandWorkedExamples) {
  const lab06::HybridGroups a = lab06::make_hybrid_groups(6, 4, 3);  // the Note's example
  EXPECT_EQ(a.world_size, 6);
  EXPECT_EQ(a.group_size, 3);
  EXPECT_EQ(a.replicas, 2);
  EXPECT_EQ(a.rank, 4);
  EXPECT_EQ(a.group, 1);
  EXPECT_EQ(a.group_rank, 1);
  EXPECT_EQ(a.group_members, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(a.replica_members, (std::vector<int>{1, 4}));

  const lab06::HybridGroups ddp = lab06::make_hybrid_groups(4, 2, 1);  // G = 1: everyone a replica
  EXPECT_EQ(ddp.replicas, 4);
  EXPECT_EQ(ddp.group, 2);
  EXPECT_EQ(ddp.group_rank, 0);
  EXPECT_EQ(ddp.group_members, (std::vector<int>{2}));
  EXPECT_EQ(ddp.replica_members, (std::vector<int>{0, 1, 2, 3}));

  const lab06::HybridGroups fsdp = lab06::make_hybrid_groups(3, 1, 3);  // G = P: one group
  EXPECT_EQ(fsdp.replicas, 1);
  EXPECT_EQ(fsdp.group, 0);
  EXPECT_EQ(fsdp.group_rank, 1);
  EXPECT_EQ(fsdp.group_members, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(fsdp.replica_members, (std::vector<int>{1}));

  const lab06::HybridGroups one = lab06::make_hybrid_groups(1, 0, 1);
  EXPECT_EQ(one.group_members, (std::vector<int>{0}));
  EXPECT_EQ(one.replica_members, (std::vector<int>{0}));
}

// For every P <= 8 and G dividing it: the groups are G consecutive ranks, each rank
// is in exactly one group and one replica set, sits at its group_rank in the one and
// at its group in the other, and every member of a group or a set sees the same list.
TEST(HybridGroups, EveryRankInOneGroupAndOneReplicaSet) {
  for (int p = 1; p <= 8; ++p) {
    for (int g : divisors(p)) {
      std::vector<int> seen_in_group(static_cast<std::size_t>(p), 0);
      for (int r = 0; r < p; ++r) {
        const lab06::HybridGroups h = lab06::make_hybrid_groups(p, r, g);
        const std::string what = "P " + std::to_string(p) + ", G " + std::to_string(g) + ", rank " + std::to_string(r);
        ASSERT_EQ(h.group_members.size(), static_cast<std::size_t>(g)) << what;
        ASSERT_EQ(h.replica_members.size(), static_cast<std::size_t>(p / g)) << what;
        EXPECT_EQ(h.replicas * h.group_size, p) << what;
        ASSERT_TRUE(h.group_rank >= 0 && h.group_rank < g && h.group >= 0 && h.group < p / g) << what;
        EXPECT_EQ(h.group_members[static_cast<std::size_t>(h.group_rank)], r) << what;
        EXPECT_EQ(h.replica_members[static_cast<std::size_t>(h.group)], r) << what;
        for (std::size_t j = 1; j < h.group_members.size(); ++j)
          EXPECT_EQ(h.group_members[j], h.group_members[j - 1] + 1) << what << ": a group is consecutive ranks";
        for (int m : h.group_members) {
          EXPECT_EQ(lab06::make_hybrid_groups(p, m, g).group_members, h.group_members) << what << ", member " << m;
          if (h.group_rank == 0) ++seen_in_group[static_cast<std::size_t>(m)];
        }
        for (int m : h.replica_members) {
          const lab06::HybridGroups o = lab06::make_hybrid_groups(p, m, g);
          EXPECT_EQ(o.replica_members, h.replica_members) << what << ", replica " << m;
          EXPECT_EQ(o.group_rank, h.group_rank) << what << ": a replica set holds one shard position";
        }
      }
      for (int r = 0; r < p; ++r) EXPECT_EQ(seen_in_group[static_cast<std::size_t>(r)], 1) << "P " << p << ", G " << g;
    }
  }
}

// Each error names the argument and the rank (and, for a G that does not divide P, both numbers).
TEST(HybridGroups, BadArgumentsNameTheArgumentAndTheRank) {
  struct Bad {
    int p, r, g;
    std::vector<std::string> words;
  };
  const std::vector<Bad> cases = {
      {6, 1, 4, {"group_size", "4", "6", "rank 1"}},  {6, 2, 0, {"group_size", "rank 2"}},
      {4, 3, -2, {"group_size", "rank 3"}},           {6, 0, 12, {"group_size", "12", "rank 0"}},
      {0, 0, 1, {"world_size"}},                      {4, 4, 2, {"rank", "4"}},
      {4, -1, 2, {"rank", "-1"}},
  };
  for (const Bad& c : cases) {
    try {
      lab06::make_hybrid_groups(c.p, c.r, c.g);
      ADD_FAILURE() << "make_hybrid_groups(" << c.p << ", " << c.r << ", " << c.g << ") should throw";
    } catch (const dtl::InvalidArgument& e) {
      for (const std::string& w : c.words) EXPECT_THAT(e.what(), HasSubstr(w)) << "P " << c.p << " G " << c.g;
    }
  }
}

// ---------------------------------------------------------------------------
// F2. The HybridCommunicator against the vendor collectives, counted per level
// ---------------------------------------------------------------------------

// Integer-valued, different on every rank and element, so that sums are exact.
std::vector<float> values_of(int rank, std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 97) + salt);
  return v;
}

// Issued together and waited for in reverse order, at every G dividing P, for
// counts 0, 1, 5 and 37 per block: each buffer holds what the vendor collective
// over all P ranks says, and across groups only the shard moves (an allreduce of
// one block per reduce-scatter), nothing for an all-gather, nothing at all at G = P.
TEST(HybridComm, CollectivesEqualTheVendorsAndOnlyTheShardCrosses) {
  const int p = comm().size(), rank = comm().rank();
  for (int g : divisors(p)) {
    HybridSetup h(g);
    const int r = p / g, j = h.groups.group_rank;
    EXPECT_EQ(h.hybrid->rank(), j);
    EXPECT_EQ(h.hybrid->world_size(), g);
    for (std::size_t count : {0, 1, 5, 37}) {
      const std::string what = "P " + std::to_string(p) + ", G " + std::to_string(g) + ", count " +
                               std::to_string(count) + ", rank " + std::to_string(rank);
      const std::size_t full = count * static_cast<std::size_t>(g);
      // The vendor's answers over all ranks.
      std::vector<float> rs_send = values_of(rank, full, 1), sum_all(full);
      MPI_Allreduce(rs_send.data(), sum_all.data(), static_cast<int>(full), MPI_FLOAT, MPI_SUM, comm());
      std::vector<float> ar = values_of(rank, count, 2), ar_want(count);
      MPI_Allreduce(ar.data(), ar_want.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm());
      std::vector<float> ag_send = values_of(rank, count, 3), ag_world(count * static_cast<std::size_t>(p));
      MPI_Allgather(ag_send.data(), static_cast<int>(count), MPI_FLOAT, ag_world.data(), static_cast<int>(count),
                    MPI_FLOAT, comm());
      const int root = g - 1;  // world rank g - 1: group 0's last rank
      std::vector<float> bc = values_of(rank, count, 4), bc_want = values_of(root, count, 4);

      h.inside->clear();
      h.across->clear();
      std::vector<float> rs_recv(count, -1.0f), rs_avg_recv(count, -1.0f), ag_recv(full, -1.0f);
      std::vector<float> rs_inplace = rs_send;
      dtl::Work w1 = h.hybrid->reduce_scatter(std::span<const float>(rs_send), std::span<float>(rs_recv));
      dtl::Work w2 = h.hybrid->allgather(std::span<const float>(ag_send), std::span<float>(ag_recv));
      dtl::Work w3 = h.hybrid->allreduce(std::span<float>(ar));
      dtl::Work w4 = h.hybrid->broadcast(std::span<float>(bc), root);
      dtl::Work w5 = h.hybrid->reduce_scatter(std::span<const float>(rs_send), std::span<float>(rs_avg_recv),
                                              dtl::ReduceOp::kAvg);
      dtl::Work w6 = h.hybrid->reduce_scatter(rs_inplace.data(), rs_inplace.data() + j * count, count,
                                              dtl::DType::kF32, dtl::ReduceOp::kSum);
      w6.wait();
      w5.wait();
      w4.wait();
      w3.wait();
      w2.wait();
      w1.wait();

      for (std::size_t i = 0; i < count; ++i) {
        const float want = sum_all[j * count + i];
        EXPECT_EQ(rs_recv[i], want) << what << ": reduce_scatter element " << i;
        EXPECT_EQ(rs_inplace[j * count + i], want) << what << ": in-place reduce_scatter element " << i;
        EXPECT_NEAR(rs_avg_recv[i], want / p, 1e-5 * std::fabs(want / p)) << what << ": kAvg element " << i;
        EXPECT_EQ(ar[i], ar_want[i]) << what << ": allreduce element " << i;
        EXPECT_EQ(bc[i], bc_want[i]) << what << ": broadcast from world rank " << root << ", element " << i;
      }
      for (int m = 0; m < g; ++m)
        for (std::size_t i = 0; i < count; ++i)
          EXPECT_EQ(ag_recv[m * count + i], ag_world[(h.groups.group * g + m) * count + i])
              << what << ": all-gather block " << m << " is the group's member " << m;

      // Inside: one operation of each kind per call. Across: an allreduce of one block per
      // reduce-scatter and per allreduce, a broadcast, nothing for the all-gather; nothing at R = 1.
      EXPECT_EQ(h.inside->count(CollectiveKind::kReduceScatter), 3) << what;
      EXPECT_EQ(h.inside->count(CollectiveKind::kAllgather), 1) << what;
      EXPECT_EQ(h.inside->count(CollectiveKind::kAllreduce), 1) << what;
      EXPECT_EQ(h.inside->count(CollectiveKind::kBroadcast), 1) << what;
      const int across = r > 1 ? 1 : 0;
      EXPECT_EQ(h.across->count(CollectiveKind::kAllreduce), 4 * across) << what;
      EXPECT_EQ(h.across->elements(CollectiveKind::kAllreduce), 4 * across * count)
          << what << ": only the shard (recv_count elements) crosses groups";
      EXPECT_EQ(h.across->count(CollectiveKind::kBroadcast), across) << what;
      EXPECT_EQ(h.across->count(CollectiveKind::kAllgather) + h.across->count(CollectiveKind::kReduceScatter), 0)
          << what << ": no all-gather or reduce-scatter crosses groups";
    }
  }
}

// Communicators that do not match the groups are refused, naming the argument and the rank.
TEST(HybridComm, MismatchedCommunicatorsAreRefused) {
  HybridSetup h(comm().size());  // one group: the replica set is this rank alone
  lab06::HybridGroups wrong = h.groups;
  wrong.group_size += 1;
  try {
    lab06::HybridCommunicator bad(*h.inside, *h.across, wrong);
    ADD_FAILURE() << "a shard group of " << comm().size() << " ranks for groups of " << wrong.group_size;
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("shard_group"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank())));
  }
  wrong = h.groups;
  wrong.replicas = 2;
  wrong.group = 1;
  try {
    lab06::HybridCommunicator bad(*h.inside, *h.across, wrong);
    ADD_FAILURE() << "a replica set of 1 rank for 2 replicas";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("replica_group"));
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(comm().rank())));
  }
}

// ---------------------------------------------------------------------------
// F3. FSDP over the HybridCommunicator: one process's result, the replicas equal
// ---------------------------------------------------------------------------

struct HybridCase {
  ShardingMode mode;
  int prefetch;
  ModelKind model;
  OptKind opt;
};
std::string hybrid_case_name(const HybridCase& c) {
  return std::string(lab06::sharding_mode_name(c.mode)) + "_p" + std::to_string(c.prefetch) + "_" +
         model_name(c.model) + "_" + opt_name(c.opt);
}
void PrintTo(const HybridCase& c, std::ostream* os) { *os << hybrid_case_name(c); }

class HybridFsdp : public ::testing::TestWithParam<HybridCase> {};

// At every G dividing P: each rank trains on its B/P rows of the global batch (its
// world rank's), the trainer shards G ways over the HybridCommunicator, and the
// group's gathered parameters (the vendor's all-gather over the group) equal one
// process's; every replica set holds the same shard, bit for bit.
TEST_P(HybridFsdp, EveryGroupSizeEqualsOneProcess) {
  const HybridCase c = GetParam();
  const int p = comm().size(), rank = comm().rank();
  const std::vector<float> expected = single_process(c.model, c.opt, 5);
  for (int g : divisors(p)) {
    HybridSetup h(g);
    const std::string what = hybrid_case_name(c) + ", P " + std::to_string(p) + ", G " + std::to_string(g);
    nn::Model model = make_model(c.model, 5 + static_cast<std::uint64_t>(rank) * 1000);  // the broadcast fixes this
    lab06::ShardedTrainer trainer(*h.hybrid, model, options_for(c.mode, c.opt, c.prefetch, test_layouts(model, g)));
    for (int step = 0; step < kSteps; ++step) {
      const Batch b = rank_batch(c.model, step, kGlobalBatch, rank, p);
      trainer.step(b.x, b.y);
    }
    const std::vector<float> got = gathered_parameters(trainer, h.group_mpi);
    EXPECT_TRUE(close_to(expected, got, what));
    std::vector<float> first = got;  // replica set's group 0
    MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_FLOAT, 0, h.replica_mpi);
    int differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != first[i] ? 1 : 0;
    EXPECT_EQ(differ, 0) << what << ": rank " << rank << " differs from group 0's replica in " << differ
                         << " elements (replicas must not drift)";
  }
}

INSTANTIATE_TEST_SUITE_P(Hybrid, HybridFsdp,
                         ::testing::Values(HybridCase{ShardingMode::kFsdp, 0, ModelKind::kOddMlp, OptKind::kSgd},
                                           HybridCase{ShardingMode::kFsdp, 0, ModelKind::kGpt, OptKind::kAdamW},
                                           HybridCase{ShardingMode::kFsdp, 1, ModelKind::kOddMlp, OptKind::kAdamW},
                                           HybridCase{ShardingMode::kFsdp, 2, ModelKind::kGpt, OptKind::kSgd},
                                           HybridCase{ShardingMode::kZero2, 1, ModelKind::kGpt, OptKind::kAdamW}),
                         [](const auto& p) { return hybrid_case_name(p.param); });

// ---------------------------------------------------------------------------
// F4. Memory and traffic as functions of G
// ---------------------------------------------------------------------------

// FSDP over the HybridCommunicator, AdamW, prefetch 0, two steps, at every G: the
// peak bytes per category are Note [ZeRO stages]'s at W = G; inside the group each
// step moves FSDP's traffic at W = G (a reduce-scatter of 4 N_G, two all-gathers of
// 4 N_G); across groups only one allreduce per unit of its shard (4 N_G / G in all);
// and FSDP over all P ranks, run here too, sends at least G times that across groups
// (buffer bytes and ring wire bytes), the goal. Rank 0 prints the table.
TEST(HybridTraffic, MemoryAndBytesAreTheClosedFormsOfG) {
  using C = nn::MemoryCategory;
  const int p = comm().size(), rank = comm().rank();
  constexpr int kMeasured = 2;
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    // FSDP over all P ranks: every operation crosses groups when there is more than one.
    auto world_backend = mpi_backend(comm());
    RecordingCommunicator world(*world_backend);
    double fsdp_buffer = 0.0, fsdp_wire = 0.0;
    {
      nn::Model model = make_model(kind, 1);
      lab06::ShardedTrainer trainer(world, model,
                                    options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, p)));
      world.clear();
      for (int step = 0; step < kMeasured; ++step) {
        const Batch b = rank_batch(kind, step, kGlobalBatch, rank, p);
        trainer.step(b.x, b.y);
      }
      for (const auto& op : world.ops()) fsdp_buffer += static_cast<double>(op.bytes) / kMeasured;
      fsdp_wire = wire_bytes(world, p) / kMeasured;
    }
    for (int g : divisors(p)) {
      const int r = p / g;
      HybridSetup h(g);
      auto& tracker = nn::memory_tracker();
      const nn::MemorySnapshot before = tracker.snapshot();
      auto delta_peak = [&](C c) { return tracker.peak(c) - before.current[static_cast<int>(c)]; };
      nn::Model model = make_model(kind, 1);
      const auto layouts = test_layouts(model, g);
      const Sizes s = sizes_of(layouts);
      const std::int64_t units = static_cast<std::int64_t>(layouts.size()), shard = s.n / g;
      const std::string what = std::string(model_name(kind)) + ", P " + std::to_string(p) + ", G " +
                               std::to_string(g) + " (N_G = " + std::to_string(s.n) + ", L = " +
                               std::to_string(s.largest) + ")";
      lab06::ShardedTrainer trainer(*h.hybrid, model,
                                    options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, layouts));
      h.inside->clear();
      h.across->clear();
      tracker.reset_peak();
      for (int step = 0; step < kMeasured; ++step) {
        const Batch b = rank_batch(kind, step, kGlobalBatch, rank, p);
        trainer.step(b.x, b.y);
      }
      EXPECT_EQ(delta_peak(C::kParameters), 4 * shard + 4 * s.largest) << what << ": peak parameter bytes";
      EXPECT_EQ(delta_peak(C::kGradients), 4 * shard + 4 * s.largest) << what << ": peak gradient bytes";
      EXPECT_EQ(delta_peak(C::kOptimizerState), 8 * shard) << what << ": AdamW state bytes";

      EXPECT_EQ(h.inside->count(CollectiveKind::kReduceScatter), kMeasured * units) << what;
      EXPECT_EQ(h.inside->bytes(CollectiveKind::kReduceScatter), static_cast<std::size_t>(kMeasured * 4 * s.n)) << what;
      EXPECT_EQ(h.inside->count(CollectiveKind::kAllgather), kMeasured * 2 * units) << what;
      EXPECT_EQ(h.inside->bytes(CollectiveKind::kAllgather), static_cast<std::size_t>(kMeasured * 8 * s.n)) << what;
      EXPECT_EQ(h.inside->count(CollectiveKind::kAllreduce), 0) << what;
      const std::int64_t across_ops = r > 1 ? kMeasured * units : 0;
      EXPECT_EQ(h.across->count(CollectiveKind::kAllreduce), across_ops) << what << ": one allreduce per unit";
      EXPECT_EQ(h.across->bytes(CollectiveKind::kAllreduce), static_cast<std::size_t>(r > 1 ? kMeasured * 4 * shard : 0))
          << what << ": across groups only the shards, 4 N_G / G bytes a step";
      EXPECT_EQ(h.across->ops().size(), static_cast<std::size_t>(across_ops)) << what << ": nothing else crosses";

      const double cross_buffer = static_cast<double>(h.across->bytes(CollectiveKind::kAllreduce)) / kMeasured;
      const double cross_wire = wire_bytes(*h.across, r) / kMeasured;
      const double fsdp_cross_buffer = r > 1 ? fsdp_buffer : 0.0, fsdp_cross_wire = r > 1 ? fsdp_wire : 0.0;
      EXPECT_LE(cross_buffer * g, fsdp_cross_buffer) << what << ": cross-group buffer bytes > 1/G of FSDP's";
      EXPECT_LE(cross_wire * g, fsdp_cross_wire * (1 + 1e-12)) << what << ": cross-group wire bytes > 1/G of FSDP's";
      if (rank == 0) {
        std::printf("[ info ] %s: across groups %.0f B a step (wire %.0f), FSDP over P %.0f (wire %.0f): "
                    "ratio %.3f (wire %.3f), 1/G = %.3f; peak params %lld B\n",
                    what.c_str(), cross_buffer, cross_wire, fsdp_cross_buffer, fsdp_cross_wire,
                    fsdp_cross_buffer > 0 ? cross_buffer / fsdp_cross_buffer : 0.0,
                    fsdp_cross_wire > 0 ? cross_wire / fsdp_cross_wire : 0.0, 1.0 / g,
                    static_cast<long long>(delta_peak(C::kParameters)));
      }
    }
  }
}

}  // namespace
}  // namespace lab06_test
