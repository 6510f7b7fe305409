// Task C: prefetch and the rate limiter (Note [Prefetch and the rate limiter]),
// and mixed precision inside FSDP (Note [Mixed precision in FSDP]).
//
// Prefetch is graded from what happened, not from what the trainer reports: a
// wrapper around the backend records when each all-gather was issued and when
// the backend completed it. On an emulated link where every operation takes at
// least 3 ms, a gather issued ahead of its unit is in flight together with the
// one before it; without prefetch none ever is; and never more than 1 + prefetch.
// A GatherWatch between them sees that each pre_* hook waits for its own unit's
// gather only, leaving the ones issued ahead in flight while the unit computes
// (Note [Watching the prefetch] in fsdp_test_util.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness/nn/half.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;
using dtl::CollectiveKind;

// GPT: 4 units. prefetch 0: one gather in flight at a time; 1 and 2: exactly 1 + k at
// some point (the first pre_forward issues unit 0 and k more), never more. (At one
// rank the emulated link takes no time, so nothing is ever seen in flight: only the
// upper limit is checked there.)
TEST(Prefetch, GathersInFlightReachButNeverExceedTheLimit) {
  for (int k : {0, 1, 2}) {
    auto inner = emulated_backend(comm(), "alpha=3ms,bw=1GB/s");
    RecordingCommunicator counting(*inner);
    GatherWatch watch(counting);
    nn::Model model = make_model(ModelKind::kGpt, 2);
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, k, test_layouts(model, comm().size()));
    o.observer = watch.observer();
    lab06::ShardedTrainer trainer(watch, model, o);
    watch.watch(trainer);
    counting.clear();
    const Batch b = rank_batch(ModelKind::kGpt, 0, kGlobalBatch, comm().rank(), comm().size());
    const lab06::StepResult r = trainer.step(b.x, b.y);
    const int most = counting.max_in_flight(CollectiveKind::kAllgather);
    if (comm().size() == 1) {
      EXPECT_LE(most, 1 + k) << "prefetch " << k;
    } else {
      EXPECT_EQ(most, 1 + k) << "prefetch " << k << ": at most " << most
                           << " all-gathers were in flight at once; expected exactly 1 + prefetch"
                           << (most > 1 + k ? " (the rate limiter lets too many through)" : " (nothing was prefetched?)");
    }
    EXPECT_LE(counting.max_in_flight(CollectiveKind::kReduceScatter), 1 + k) << "prefetch " << k;
    EXPECT_EQ(counting.count(CollectiveKind::kAllgather), 2 * model.unit_count()) << "prefetch " << k;
    EXPECT_TRUE(watch.problems.empty()) << "rank " << comm().rank() << ", prefetch " << k << ", "
                                        << (watch.problems.empty() ? "" : watch.problems.front()) << " ("
                                        << watch.problems.size() << " hooks like it)";
    if (comm().rank() == 0) {
      std::printf("[ info ] prefetch %d: at most %d all-gathers in flight; the trainer waited %.1f ms for communication\n",
                  k, most, r.exposed_seconds * 1e3);
    }
  }
}

// With prefetch k, the full parameters and gradients of at most 1 + k units exist at
// once: peak <= 4S + 4(1 + k)L per category (Note [ZeRO stages]); and the result is
// the same as without prefetch, bit for bit (the same operations on the same data).
TEST(Prefetch, MemoryWithinTheBoundAndResultUnchanged) {
  using C = nn::MemoryCategory;
  auto backend = mpi_backend(comm());
  std::vector<std::vector<float>> results;
  for (int k : {0, 1, 3}) {
    auto& tracker = nn::memory_tracker();
    const nn::MemorySnapshot before = tracker.snapshot();
    nn::Model model = make_model(ModelKind::kGpt, 3);
    const auto layouts = test_layouts(model, comm().size());
    const Sizes s = sizes_of(layouts);
    {
      lab06::ShardedTrainer trainer(*backend, model, options_for(ShardingMode::kFsdp, OptKind::kAdamW, k, layouts));
      tracker.reset_peak();
      for (int step = 0; step < 2; ++step) {
        const Batch b = rank_batch(ModelKind::kGpt, step, kGlobalBatch, comm().rank(), comm().size());
        trainer.step(b.x, b.y);
      }
      const std::int64_t bound = 4 * (s.n / comm().size()) + 4 * (1 + k) * s.largest;
      const std::int64_t params = tracker.peak(C::kParameters) - before.current[static_cast<int>(C::kParameters)];
      const std::int64_t grads = tracker.peak(C::kGradients) - before.current[static_cast<int>(C::kGradients)];
      EXPECT_LE(params, bound) << "prefetch " << k << ": peak parameter bytes above 4S + 4(1 + k)L";
      EXPECT_LE(grads, bound) << "prefetch " << k << ": peak gradient bytes above 4S + 4(1 + k)L";
      if (comm().rank() == 0) {
        std::printf("[ info ] prefetch %d: peak params %lld B, grads %lld B; bound 4S + 4(1+k)L = %lld B\n", k,
                    static_cast<long long>(params), static_cast<long long>(grads), static_cast<long long>(bound));
      }
      results.push_back(gathered_parameters(trainer, comm()));
    }
  }
  EXPECT_TRUE(results[1] == results[0]) << "rank " << comm().rank() << ": prefetch 1 changed the result";
  EXPECT_TRUE(results[2] == results[0]) << "rank " << comm().rank() << ": prefetch 3 changed the result";
}

// ---------------------------------------------------------------------------
// Mixed precision inside FSDP
// ---------------------------------------------------------------------------

// bf16 gathers: the weights forward and backward see are the master shards rounded
// to bf16 (relative error <= 2^-8), the gradients are rounded too. Over kSteps steps
// of SGD (lr 0.05, momentum 0.9) the parameters stay within 1e-2 + 2e-2 |p| of the
// fp32 run (measured at 1-4 ranks: at most 3.2e-3, on a near-zero bias of the MLP);
// a gather that is not widened (zeros) or a stale one is off by O(0.1). The
// all-gathers move 2 bytes per element, half of fp32's.
TEST(MixedFsdp, Bf16GathersHalfTheBytesAndStaysNearFp32) {
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    const std::vector<float> expected = single_process(kind, OptKind::kSgd, 5);
    auto inner = mpi_backend(comm());
    RecordingCommunicator counting(*inner);
    nn::Model model = make_model(kind, 5);
    const auto layouts = test_layouts(model, comm().size());
    lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kSgd, 1, layouts);
    o.param_dtype = nn::DType::kBF16;
    lab06::ShardedTrainer trainer(counting, model, o);
    for (int step = 0; step < kSteps; ++step) {
      counting.clear();
      const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), comm().size());
      trainer.step(b.x, b.y);
      EXPECT_EQ(counting.bytes(CollectiveKind::kAllgather), static_cast<std::size_t>(2 * 2 * sizes_of(layouts).n))
          << model_name(kind) << ": two bf16 gathers per unit, 2 bytes per padded element";
      for (const auto& op : counting.ops()) {
        if (op.kind == CollectiveKind::kAllgather) {
          EXPECT_EQ(op.dtype, dtl::DType::kBF16) << model_name(kind);
        } else if (op.kind == CollectiveKind::kReduceScatter) {
          EXPECT_EQ(op.dtype, dtl::DType::kF32) << model_name(kind);
        }
      }
    }
    const std::vector<float> got = gathered_parameters(trainer, comm());
    EXPECT_TRUE(close_to(expected, got, std::string("bf16 FSDP ") + model_name(kind), {1e-2, 2e-2}));
    // Not bit-equal to fp32: the rounding really happened.
    EXPECT_FALSE(got == expected) << model_name(kind) << ": bf16 gathers gave the fp32 result exactly";
    // The 16-bit buffers are transient: nothing is left in kCommunication between steps.
    EXPECT_EQ(trainer.unit(0).half_full.defined() && trainer.unit(0).half_full.storage()->is_allocated(), false);
  }
}

// fp16 with a loss scale: the sharded grad scaler (Note [Mixed precision in FSDP]).
// The overflow is made to land in a few shards only: before step 1 the test zeroes
// column 0 of fc0's weight (elements 0, 2, ..., 12 of unit fc0, 21 elements) in every
// shard, and the last rank's inputs get feature 0 = 1e6. Then only dW0[:, 0] = dy0 x0
// overflows fp16 (the activations stay normal: the huge feature meets zero weights),
// and after the reduce-scatter the infs sit in the shards holding elements 0..12 — at
// W = 3 ranks 0 and 1, at W = 4 ranks 0, 1 and 2: the last rank sees none locally.
// Every rank must skip: the shards and AdamW's state keep every bit, the scale halves
// (1024 -> 512), and the next step trains again.
TEST(MixedFsdp, Fp16OverflowInSomeShardsSkipsTheStepOnEveryRank) {
  auto backend = mpi_backend(comm());
  const int last = comm().size() - 1;
  nn::Model model = make_model(ModelKind::kOddMlp, 9);
  const auto layouts = test_layouts(model, comm().size());
  lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, layouts);
  o.param_dtype = nn::DType::kF16;
  o.loss_scale = 1024.0f;
  lab06::ShardedTrainer trainer(*backend, model, o);
  const std::vector<float> scales = {1024.0f, 1024.0f, 512.0f};
  for (int step = 0; step < 3; ++step) {
    Batch b = rank_batch(ModelKind::kOddMlp, step, kGlobalBatch, comm().rank(), comm().size());
    if (step == 1) {
      const std::int64_t shard = layouts[0].shard, begin = comm().rank() * shard;
      float* p = trainer.unit(0).shard.data<float>();
      for (std::int64_t e = 0; e <= 12; e += 2) {
        if (e >= begin && e < begin + shard) p[e - begin] = 0.0f;
      }
      if (comm().rank() == last) {
        for (std::int64_t r = 0; r < b.x.dim(0); ++r) b.x.span<float>()[2 * r] *= 1e6f;
      }
    }
    std::vector<std::vector<std::uint8_t>> shards, moments;
    for (int u = 0; u < trainer.unit_count(); ++u) {
      shards.push_back(bytes_of(trainer.unit(u).shard));
      moments.push_back(bytes_of(trainer.unit(u).adamw->m()));
    }
    const lab06::StepResult r = trainer.step(b.x, b.y);
    EXPECT_EQ(r.scale, scales[static_cast<std::size_t>(step)]) << "step " << step;
    EXPECT_EQ(r.skipped, step == 1) << "rank " << comm().rank() << ", step " << step
                                    << (step == 1 ? ": an inf in some rank's shard must skip the step on every rank"
                                                  : "");
    for (int u = 0; u < trainer.unit_count(); ++u) {
      const bool same = bytes_of(trainer.unit(u).shard) == shards[static_cast<std::size_t>(u)] &&
                        bytes_of(trainer.unit(u).adamw->m()) == moments[static_cast<std::size_t>(u)];
      EXPECT_EQ(same, step == 1) << "rank " << comm().rank() << ", step " << step << ", unit " << u
                                 << (step == 1 ? ": a skipped step moved the shard or AdamW's state"
                                               : ": a step that should train left the shard unchanged");
    }
  }
  EXPECT_EQ(trainer.loss_scale(), 512.0f);
  EXPECT_EQ(trainer.steps(), 2);
}

}  // namespace
}  // namespace lab06_test
