// Lab 07, task G: the zero-bubble schedule ZB-H1. The orders are checked by the
// test's own rules and simulator (schedule_sim_util.h), never against
// zb_h1_schedule() itself: valid orders whose F's and B's are the test's 1F1B
// (pipeline_test_util.h), at most P micro-batches between F and W on any stage
// (1F1B's peak), no wait in a cycle, a step no longer than the greedy placement
// of the W's (greedy_w_makespan()), and the bubble a third of 1F1B's at equal op
// times. Then the given InterleavedStage runs them with the split backward: the
// trained weights must equal one process, and equal bit for bit the same
// executor running 1F1B with the fused backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "harness/error.h"
#include "lab07/zero_bubble.h"
#include "labs/07_pipeline/tests/interleave_test_util.h"

namespace lab07_test {
namespace {

std::vector<std::vector<Action>> zb_all(int P, int m) {
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < P; ++s) orders.push_back(lab07::zb_h1_schedule(P, s, m));
  return orders;
}

// The test's 1F1B orders of all stages (one_f_one_b_order()'s), the caps searched once.
std::vector<std::vector<Action>> one_f_one_b_all(int P, int m) {
  std::vector<std::vector<Action>> orders;
  for (int cap : leanest_caps(P, m)) orders.push_back(greedy_order(m, cap));
  return orders;
}

std::string where(int P, int m) { return "P = " + std::to_string(P) + ", m = " + std::to_string(m); }

// Each stage's list: F, B, W of every micro-batch in order, and 1F1B's order of F and B.
TEST(ZeroBubble, ValidOrdersWhoseForwardsAndBackwardsAreOneFOneBs) {
  for (int P = 1; P <= 6; ++P) {
    for (int m = 1; m <= 12; ++m) {
      const std::vector<std::vector<Action>> base = one_f_one_b_all(P, m);
      for (int s = 0; s < P; ++s) {
        const std::vector<Action> order = lab07::zb_h1_schedule(P, s, m);
        const std::string what = "stage " + std::to_string(s) + ", " + where(P, m) + ": " + chunk_text(order);
        EXPECT_EQ(order.size(), 3u * static_cast<std::size_t>(m)) << what;
        EXPECT_EQ(check_order(order, 1, m), "") << what;
        EXPECT_EQ(std::count_if(order.begin(), order.end(), [](const Action& a) { return a.pass == Pass::kWeight; }), m)
            << what;
        EXPECT_EQ(chunk_text(without_w(order)), chunk_text(base[static_cast<std::size_t>(s)])) << what;
      }
    }
  }
}

// Equal peak memory, counted honestly: a micro-batch counts whole from its F to its W.
TEST(ZeroBubble, NoStageHoldsMoreThanOneFOneBsPeak) {
  for (int P = 1; P <= 6; ++P) {
    for (int m = 1; m <= 12; ++m) {
      int zb_peak = 0, one_f_one_b_peak = 0;
      for (const std::vector<Action>& order : one_f_one_b_all(P, m)) {
        one_f_one_b_peak = std::max(one_f_one_b_peak, peak_stashed(order));
      }
      for (int s = 0; s < P; ++s) {
        const int held = peak_stashed(lab07::zb_h1_schedule(P, s, m));
        EXPECT_LE(held, P) << "stage " << s << ", " << where(P, m);
        zb_peak = std::max(zb_peak, held);
      }
      EXPECT_EQ(zb_peak, one_f_one_b_peak) << where(P, m);
    }
  }
}

// Op times (t_F, t_B, t_W) with t_W <= t_B; 1F1B's backward costs t_B + t_W.
const std::vector<std::tuple<double, double, double>> kTimes = {
    {1.0, 1.0, 1.0}, {1.0, 2.0, 1.0}, {2.0, 2.0, 1.0}, {1.0, 1.0, 0.5}, {1.0, 2.0, 2.0}};

TEST(ZeroBubble, NoDeadlockAndNoSlowerThanTheGreedyPlacement) {
  for (const auto& [t_f, t_b, t_w] : kTimes) {
    for (int P = 1; P <= 6; ++P) {
      for (int m = 1; m <= 12; ++m) {
        const std::string what = where(P, m) + ", t = " + std::to_string(t_f) + "/" + std::to_string(t_b) + "/" +
                                 std::to_string(t_w);
        const Simulation zb = simulate(zb_all(P, m), 1, m, t_f, t_b, t_w);
        ASSERT_EQ(zb.deadlock, "") << what;
        const std::vector<std::vector<Action>> base = one_f_one_b_all(P, m);
        const double greedy = greedy_w_makespan(base, m, t_f, t_b, t_w, P);
        ASSERT_GT(greedy, 0.0) << what;
        EXPECT_LE(zb.makespan, greedy + 1e-9) << what;
        EXPECT_LE(zb.makespan, simulate(base, 1, m, t_f, t_b + t_w).makespan + 1e-9) << what;
      }
    }
  }
}

// The paper's claim (section 3.1): with t_F = t_B = t_W = t, ZB-H1 idles
// (P - 1)(t_F + t_B - t_W) = (P - 1) t per stage, 1F1B (P - 1)(t_F + t_B + t_W)
// = 3 (P - 1) t: a third. The goal, at P = 4, m = 8: ZB-H1's bubble at
// most half of 1F1B's, as a fraction of each one's step.
TEST(ZeroBubble, BubbleIsAThirdOfOneFOneBs) {
  for (int P = 1; P <= 6; ++P) {
    for (int m = P; m <= 3 * P; ++m) {
      const Simulation zb = simulate(zb_all(P, m), 1, m, 1.0, 1.0, 1.0);
      const Simulation base = simulate(one_f_one_b_all(P, m), 1, m, 1.0, 2.0);
      for (int s = 0; s < P; ++s) {
        const auto us = static_cast<std::size_t>(s);
        EXPECT_EQ(zb.makespan - zb.busy[us], P - 1.0) << "stage " << s << ", " << where(P, m);
        EXPECT_EQ(base.makespan - base.busy[us], 3.0 * (P - 1)) << "stage " << s << ", " << where(P, m);
      }
    }
  }
  const Simulation zb = simulate(zb_all(4, 8), 1, 8, 1.0, 1.0, 1.0);
  const Simulation base = simulate(one_f_one_b_all(4, 8), 1, 8, 1.0, 2.0);
  const double zb_bubble = 1.0 - zb.busy[0] / zb.makespan, base_bubble = 1.0 - base.busy[0] / base.makespan;
  EXPECT_LE(zb_bubble, 0.5 * base_bubble);
  std::printf("# P = 4, m = 8, t_F = t_B = t_W: bubble ZB-H1 %.3f, 1F1B %.3f of the step (ratio %.3f)\n", zb_bubble,
              base_bubble, zb_bubble / base_bubble);
}

TEST(ZeroBubble, BadArgumentsAreNamed) {
  expect_invalid([] { lab07::zb_h1_schedule(0, 0, 4); }, "stages");
  expect_invalid([] { lab07::zb_h1_schedule(2, 2, 4); }, "stage");
  expect_invalid([] { lab07::zb_h1_schedule(2, -1, 4); }, "stage");
  expect_invalid([] { lab07::zb_h1_schedule(2, 0, 0); }, "micro_batches");
  expect_invalid([] { lab07::zb_h1_schedule(2, 0, lab07::kMaxMicroBatches + 1); }, "micro_batches");
}

// ---------------------------------------------------------------------------
// Run by InterleavedStage with the split backward
// ---------------------------------------------------------------------------

constexpr std::int64_t kRows = 12;  // m = 5 and 8 do not divide it: uneven micro-batches
constexpr int kSteps = 2;

void expect_equivalent(ModelKind kind, int m) {
  const int P = comm().size(), s = comm().rank();
  const int units = std::max(5, P);
  const InterleavedRun zb = run_schedule(kind, 1, m, kSteps, kRows, units, lab07::zb_h1_schedule(P, s, m));
  const InterleavedRun base = run_schedule(kind, 1, m, kSteps, kRows, units, one_f_one_b_order(P, s, m));
  const Oracle oracle = run_oracle(kind, 3, kSteps, kRows, units);
  const std::string what = std::string(model_name(kind)) + ", " + where(P, m) + ", rank " + std::to_string(s);
  const auto [begin, end] = zb.units[0];
  EXPECT_TRUE(close_to(unit_values(oracle.model, begin, end), zb.values[0],
                       "the parameters after " + std::to_string(kSteps) + " steps (" + what + ")"));
  // B then W adds what the fused backward adds, in the same micro-batch order: bit for bit.
  EXPECT_TRUE(zb.values[0] == base.values[0]) << "ZB-H1's weights differ from 1F1B's bit for bit (" << what << ")";
  if (s == P - 1) {
    for (int step = 0; step < kSteps; ++step) {
      const double want = oracle.losses[static_cast<std::size_t>(step)];
      EXPECT_NEAR(zb.losses[static_cast<std::size_t>(step)], want, 1e-5 * (1.0 + want))
          << "the loss of step " << step << " (" << what << ")";
    }
  }
  // The same messages as 1F1B: W sends nothing.
  EXPECT_EQ(zb.messages, base.messages) << what;
}

TEST(ZeroBubbleRun, EqualsOneProcessAndOneFOneBBitForBit) {
  const int P = comm().size();
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    for (int m : {1, P, 5, 8}) expect_equivalent(kind, m);
  }
}

// The executor refuses a schedule whose W's are partial or come before their B,
// on every rank, before any message.
TEST(ZeroBubbleRun, BadSplitSchedulesAreRefused) {
  const int P = comm().size(), s = comm().rank();
  const int m = 2;
  std::vector<Action> early = lab07::zb_h1_schedule(P, s, m);
  std::vector<Action> partial = early;
  partial.pop_back();  // the last W is missing
  const auto b0 = std::find(early.begin(), early.end(), Action{Pass::kBackward, 0});
  const auto w0 = std::find(early.begin(), early.end(), Action{Pass::kWeight, 0});
  std::iter_swap(b0, w0);  // W0 before B0
  for (const std::vector<Action>* bad : {&partial, &early}) {
    try {
      run_schedule(ModelKind::kMlp, 1, m, 1, kRows, std::max(5, P), *bad);
      ADD_FAILURE() << "rank " << s << " accepted " << chunk_text(*bad);
    } catch (const dtl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("schedule"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lab07_test
