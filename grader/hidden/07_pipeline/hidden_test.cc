// Lab 07 hidden tests (an example set), at 5 and 6 ranks: 5 and 6 stages of a
// 7-unit MLP and GPT, GPipe and 1F1B with m = 1 and m = 7 (not divisible by P), your
// schedules at 7 to 12 stages (pure functions, checked on every rank),
// the order each stage ran, the activation slots from the memory tracker, weight
// stashing, and every grid of 5 and 6 ranks; interleaved 1F1B and ZB-H1 at more
// stages. Same oracles as the public tests.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "lab07/zero_bubble.h"
#include "labs/07_pipeline/tests/interleave_test_util.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {
namespace {

constexpr int kUnits = 7;
constexpr std::int64_t kBatch = 15;

TEST(HiddenPipeline, DeepPipelinesEqualOneProcess) {
  const int P = comm().size(), s = comm().rank();
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    for (Order order : {Order::kGPipe, Order::kOneFOneB}) {
      for (int m : {1, 7}) {
        const PipelineRun run = run_pipeline(kind, order, m, 2, kBatch, false, 9, kUnits);
        const Oracle oracle = run_oracle(kind, 9, 2, kBatch, kUnits);
        EXPECT_TRUE(close_to(unit_values(oracle.model, run.begin, run.end), run.values,
                             std::string(model_name(kind)) + " " + order_name(order) + ", m = " + std::to_string(m)));
        std::vector<Action> ran;
        for (const lab07::Event& e : run.events) ran.push_back({e.pass, e.micro_batch});
        EXPECT_EQ(text(ran), text(order_of(order, P, s, m)));
      }
    }
  }
}

// Your schedules at more stages than the public tests try (7 to 12) and up to 16
// micro-batches: fewer than the stages (the warm-up cut short by m), as many, more,
// and counts P does not divide. Every rank checks them all (no communication).
TEST(HiddenPipeline, SchedulesAtSevenToTwelveStages) {
  for (int P = 7; P <= 12; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m = 1; m <= 16; ++m) {
        EXPECT_EQ(text(lab07::gpipe_schedule(P, s, m)), text(order_of(Order::kGPipe, P, s, m)))
            << "GPipe, P = " << P << ", stage " << s << ", m = " << m;
        EXPECT_EQ(text(lab07::one_f_one_b_schedule(P, s, m)), text(order_of(Order::kOneFOneB, P, s, m)))
            << "1F1B, P = " << P << ", stage " << s << ", m = " << m;
      }
    }
  }
}

TEST(HiddenPipeline, ActivationSlots) {
  const int P = comm().size(), s = comm().rank();
  constexpr std::int64_t kRows = 14;
  for (Order order : {Order::kGPipe, Order::kOneFOneB}) {
    for (int m : {2, 7}) {
      nn::Model whole = make_model(ModelKind::kMlp, 3, kUnits);
      const nn::Stage stage = stage_of(whole, even_cut(kUnits, P), s, input_shape(ModelKind::kMlp, kRows));
      lab07::PipelineOptions options;
      options.micro_batches = m;
      lab07::PipelineStage pipe(comm(), std::move(whole).slice(stage.begin, stage.end), stage, options);
      const std::vector<Action> schedule = order_of(order, P, s, m);
      const Batch b = make_batch(ModelKind::kMlp, 0, kRows, 0, kRows);
      pipe.train_step(b.x, b.y, schedule);
      auto& tracker = nn::memory_tracker();
      const std::int64_t before = tracker.current(nn::MemoryCategory::kActivations);
      tracker.reset_peak();
      pipe.train_step(b.x, b.y, schedule);
      const std::int64_t peak = tracker.peak(nn::MemoryCategory::kActivations) - before;
      // One micro-batch's forward (A) and backward (D) bytes on a fresh copy of the stage.
      nn::Model probe = make_model(ModelKind::kMlp, 3, kUnits);
      nn::Model copy = std::move(probe).slice(stage.begin, stage.end);
      const std::int64_t rows = kRows / m;
      nn::Tensor x = s == 0 ? make_batch(ModelKind::kMlp, 0, rows, 0, rows).x
                            : nn::Tensor::zeros(lab07::with_rows(stage.input_shape, rows), nn::DType::kF32,
                                                nn::MemoryCategory::kCommunication);
      const nn::Tensor dy = nn::Tensor::zeros(lab07::with_rows(stage.output_shape, rows), nn::DType::kF32,
                                              nn::MemoryCategory::kCommunication);
      const std::int64_t start = tracker.current(nn::MemoryCategory::kActivations);
      tracker.reset_peak();
      copy.forward(x);
      const std::int64_t a = tracker.current(nn::MemoryCategory::kActivations) - start;
      const std::int64_t f = tracker.peak(nn::MemoryCategory::kActivations) - start;
      tracker.reset_peak();
      copy.backward(dy);
      const std::int64_t d = tracker.peak(nn::MemoryCategory::kActivations) - start - a;
      const std::int64_t slots = order == Order::kGPipe ? m : std::min(m, P - s);
      EXPECT_EQ(peak, std::max((slots - 1) * a + f, slots * a + d))
          << "stage " << s << " of " << P << " (" << order_name(order) << ", m = " << m << "): expected " << slots
          << " micro-batches of activations at once";
    }
  }
}

TEST(HiddenStash, VersionsAtDeepPipelines) {
  const int P = comm().size(), s = comm().rank();
  const int m = 8;
  const AsyncRun run = run_async(true, m, kUnits);
  const int warm_up = std::min(P - s - 1, m);
  for (const lab07::Event& e : run.events) {
    EXPECT_EQ(e.version, std::max(0, e.micro_batch - warm_up))
        << "stage " << s << ": " << static_cast<char>(e.pass) << e.micro_batch;
  }
  for (int i = 0; i < m; ++i) {
    EXPECT_TRUE(run.forward_weights[static_cast<std::size_t>(i)] == run.backward_weights[static_cast<std::size_t>(i)])
        << "stage " << s << ": B" << i << " computed with other weights than F" << i;
  }
}

TEST(HiddenGrid, EveryGridEqualsOneProcess) {
  const int W = comm().size();
  constexpr std::int64_t kGlobal = 30;  // divisible by D = 1, 2, 3, 5, 6
  for (int P = 1; P <= W; ++P) {
    if (W % P != 0) continue;
    lab07::Grid grid = lab07::make_grid(comm(), P);
    EXPECT_EQ(grid.model_rank, comm().rank() % P);
    const std::int64_t rows = kGlobal / grid.replicas;
    nn::Model whole = make_model(ModelKind::kMlp, 4, kUnits);
    const nn::Stage stage = stage_of(whole, even_cut(kUnits, P), grid.model_rank, input_shape(ModelKind::kMlp, rows));
    nn::Model model = std::move(whole).slice(stage.begin, stage.end);
    const nn::Tensor values = model.flatten_values();
    const nn::Tensor grads = model.flatten_grads();
    nn::Sgd sgd(kSgd, values.numel());
    dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kThread);
    for (int step = 0; step < 2; ++step) {
      const Batch b = make_batch(ModelKind::kMlp, step, kGlobal, grid.replica * rows, (grid.replica + 1) * rows);
      naive_step(grid.model_group, model, stage, b);
      lab07::allreduce_data_parallel_gradients(data, model);
      sgd.step(values.span<float>(), grads.span<float>());
    }
    const Oracle oracle = run_oracle(ModelKind::kMlp, 4, 2, kGlobal, kUnits);
    EXPECT_TRUE(close_to(unit_values(oracle.model, stage.begin, stage.end), values_of(model),
                         std::to_string(grid.replicas) + " x " + std::to_string(P) + " grid"));
  }
}

}  // namespace
}  // namespace lab07_test

// Interleaved 1F1B (task F) beyond the public P <= 4: your orders at 6 to 9 ranks
// with v = 2 .. 5 (rules, simulator, in-flight bound, bubble), and run by the given
// InterleavedStage at 5 and 6 ranks, v = 2 and 3, m = P and 2P on 15 rows (2P does
// not divide it), against one process. Same oracles as the public tests.
namespace lab07_test {
namespace {

TEST(HiddenInterleaved, OrdersAndBubbleAtMoreRanksAndChunks) {
  for (int P = 6; P <= 9; ++P) {
    for (int v = 2; v <= 5; ++v) {
      for (int m : {P, 3 * P}) {
        std::vector<std::vector<Action>> orders;
        for (int s = 0; s < P; ++s) orders.push_back(lab07::interleaved_schedule(P, s, m, v));
        bool valid = true;
        for (int s = 0; s < P; ++s) {
          const std::vector<Action>& order = orders[static_cast<std::size_t>(s)];
          const std::string why = check_order(order, v, m);
          EXPECT_EQ(why, "") << "P " << P << " v " << v << " m " << m << " rank " << s;
          valid = valid && why.empty() && order.size() == 2u * static_cast<std::size_t>(v * m);
          EXPECT_EQ(peak_in_flight(order), std::min(v * m, (v - 1) * P + 2 * (P - 1 - s) + 1))
              << "P " << P << " v " << v << " m " << m << " rank " << s;
        }
        if (!valid) continue;
        const Simulation sim = simulate(orders, v, m, 1.0, 1.0);
        EXPECT_EQ(sim.deadlock, "") << "P " << P << " v " << v << " m " << m;
        EXPECT_EQ(sim.makespan, 2.0 * (v * m + P - 1)) << "P " << P << " v " << v << " m " << m;
      }
    }
  }
}

TEST(HiddenInterleaved, FiveAndSixRanksEqualOneProcess) {
  const int P = comm().size();
  constexpr std::int64_t kRows = 15;
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    for (int v : {2, 3}) {
      for (int m : {P, 2 * P}) {
        if (m > kRows) continue;
        const int units = v * P + 1;  // one virtual stage of two units
        const InterleavedRun run = run_interleaved(kind, v, m, 2, kRows, units, 9);
        const Oracle oracle = run_oracle(kind, 9, 2, kRows, units);
        for (int c = 0; c < v; ++c) {
          const auto [begin, end] = run.units[static_cast<std::size_t>(c)];
          EXPECT_TRUE(close_to(unit_values(oracle.model, begin, end), run.values[static_cast<std::size_t>(c)],
                               std::string(model_name(kind)) + " v " + std::to_string(v) + " m " + std::to_string(m) +
                                   " chunk " + std::to_string(c)));
        }
        if (comm().rank() == P - 1) {
          for (int step = 0; step < 2; ++step) {
            const double want = oracle.losses[static_cast<std::size_t>(step)];
            EXPECT_NEAR(run.losses[static_cast<std::size_t>(step)], want, 1e-5 * (1.0 + want));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lab07_test

// Task G, ZB-H1: the orders at 7 to 12 stages and up to 20 micro-batches (fewer
// than the stages too), against the test's 1F1B, the stash bound, the greedy
// placement of the W's at three op-time ratios and the bubble at equal op
// times; then the split run at 5 and 6 ranks against one process and against
// 1F1B through the same executor, bit for bit. Same oracles as the public tests.
namespace lab07_test {
namespace {

// The test's 1F1B orders of all stages, the caps searched once.
std::vector<std::vector<Action>> hidden_one_f_one_b(int P, int m) {
  std::vector<std::vector<Action>> orders;
  for (int cap : leanest_caps(P, m)) orders.push_back(greedy_order(m, cap));
  return orders;
}

TEST(HiddenZeroBubble, OrdersMemoryAndBubbleAtMoreStages) {
  for (int P = 7; P <= 12; ++P) {
    for (int m : {1, 3, P - 1, P, P + 3, 2 * P, 20}) {
      const std::string what = "P " + std::to_string(P) + " m " + std::to_string(m);
      const std::vector<std::vector<Action>> base = hidden_one_f_one_b(P, m);
      std::vector<std::vector<Action>> orders;
      bool valid = true;
      int peak = 0, base_peak = 0;
      for (int s = 0; s < P; ++s) {
        orders.push_back(lab07::zb_h1_schedule(P, s, m));
        const std::vector<Action>& order = orders.back();
        const auto us = static_cast<std::size_t>(s);
        const std::string why = check_order(order, 1, m);
        EXPECT_EQ(why, "") << what << " stage " << s;
        valid = valid && why.empty() && order.size() == 3u * static_cast<std::size_t>(m);
        EXPECT_EQ(text(without_w(order)), text(base[us])) << what << " stage " << s;
        EXPECT_LE(peak_stashed(order), P) << what << " stage " << s;
        peak = std::max(peak, peak_stashed(order));
        base_peak = std::max(base_peak, peak_stashed(base[us]));
      }
      EXPECT_EQ(peak, base_peak) << what;
      if (!valid) continue;
      for (const auto& [t_f, t_b, t_w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 3.0, 2.0}, std::tuple{3.0, 2.0, 1.0}}) {
        const Simulation sim = simulate(orders, 1, m, t_f, t_b, t_w);
        ASSERT_EQ(sim.deadlock, "") << what;
        EXPECT_LE(sim.makespan, greedy_w_makespan(base, m, t_f, t_b, t_w, P) + 1e-9)
            << what << " t " << t_f << "/" << t_b << "/" << t_w;
        if (t_f == t_b && t_b == t_w && m >= P) {
          EXPECT_EQ(sim.makespan, 3.0 * m + P - 1) << what;
        }
      }
    }
  }
}

TEST(HiddenZeroBubble, FiveAndSixRanksEqualOneProcess) {
  const int P = comm().size(), s = comm().rank();
  constexpr std::int64_t kRows = 15;
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    for (int m : {2, P + 1, 15}) {
      const int units = P + 2;  // two stages of two units
      const InterleavedRun zb = run_schedule(kind, 1, m, 2, kRows, units, lab07::zb_h1_schedule(P, s, m), 9);
      const InterleavedRun base = run_schedule(kind, 1, m, 2, kRows, units, one_f_one_b_order(P, s, m), 9);
      const Oracle oracle = run_oracle(kind, 9, 2, kRows, units);
      const std::string what = std::string(model_name(kind)) + " m " + std::to_string(m);
      const auto [begin, end] = zb.units[0];
      EXPECT_TRUE(close_to(unit_values(oracle.model, begin, end), zb.values[0], what));
      EXPECT_TRUE(zb.values[0] == base.values[0]) << what << ": not 1F1B's weights bit for bit";
      if (s == P - 1) {
        for (int step = 0; step < 2; ++step) {
          const double want = oracle.losses[static_cast<std::size_t>(step)];
          EXPECT_NEAR(zb.losses[static_cast<std::size_t>(step)], want, 1e-5 * (1.0 + want)) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lab07_test
