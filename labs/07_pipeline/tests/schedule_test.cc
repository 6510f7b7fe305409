// Lab 07: the schedules (task B) against what they must achieve, in the test's own
// simulated pipeline (schedule_sim_util.h), and stage balancing (task A) against
// brute force and a unit whose time the test knows.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "harness/error.h"
#include "harness/random.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {
namespace {

// ---------------------------------------------------------------------------
// Task B: schedules
// ---------------------------------------------------------------------------

TEST(Schedules, GPipeIsAllForwardsThenAllBackwards) {
  for (int P = 1; P <= 5; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m : {1, 2, 3, 5, 8}) {
        EXPECT_EQ(text(lab07::gpipe_schedule(P, s, m)), text(gpipe_order(P, s, m)))
            << "P = " << P << ", stage " << s << ", m = " << m;
      }
    }
  }
}

// The worked example of Note [GPipe and 1F1B], and one stage alone.
TEST(Schedules, OneFOneBWorkedExamples) {
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 0, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 1, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
}

/// Every stage's 1F1B order of a P-stage pipeline with m micro-batches.
std::vector<std::vector<Action>> one_f_one_b_orders(int P, int m) {
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < P; ++s) orders.push_back(lab07::one_f_one_b_schedule(P, s, m));
  return orders;
}

std::string where(int P, int m) { return "P = " + std::to_string(P) + ", m = " + std::to_string(m); }

// What 1F1B achieves, checked on the schedules themselves (Note [GPipe and 1F1B]):
// each stage's order is valid (every micro-batch once as F and once as B, F first,
// both in micro-batch order), the stages together never wait in a cycle, and the
// simulated step is as short as GPipe's, with unit forwards and backwards of 1 and
// of 2 (free messages). The in-flight counts are the next test's.
TEST(Schedules, OneFOneBIsValidDeadlockFreeAndAsFastAsGPipe) {
  for (int P = 1; P <= 6; ++P) {
    for (int m = 1; m <= 9; ++m) {
      const std::vector<std::vector<Action>> orders = one_f_one_b_orders(P, m);
      bool valid = true;
      for (int s = 0; s < P; ++s) {
        const std::string why = check_order(orders[static_cast<std::size_t>(s)], 1, m);
        EXPECT_EQ(why, "") << "stage " << s << ", " << where(P, m) << ": " << text(orders[static_cast<std::size_t>(s)]);
        valid = valid && why.empty();
      }
      if (!valid) continue;
      std::vector<std::vector<Action>> gpipe;
      for (int s = 0; s < P; ++s) gpipe.push_back(gpipe_order(P, s, m));
      for (double t_b : {1.0, 2.0}) {
        const Simulation sim = simulate(orders, 1, m, 1.0, t_b);
        EXPECT_EQ(sim.deadlock, "") << where(P, m);
        if (!sim.deadlock.empty()) break;
        EXPECT_EQ(sim.makespan, simulate(gpipe, 1, m, 1.0, t_b).makespan)
            << where(P, m) << ", t_f = 1, t_b = " << t_b << ": a step longer than GPipe's (a bubble of its own)";
      }
    }
  }
}

// Activation memory in micro-batches (handout, section (c)): GPipe holds all m; 1F1B
// holds on each stage the fewest that still give GPipe's step time. The test does not
// write that number down: leanest_caps() searches for it in the simulated pipeline
// (schedule_sim_util.h). The search is checked first, independently of the code under
// test: its caps keep GPipe's step time, and lowering any one of them loses it (a
// slower step or a deadlock).
TEST(Schedules, InFlightMicroBatches) {
  for (int P = 1; P <= 6; ++P) {
    for (int m = 1; m <= 9; ++m) {
      const std::vector<int> caps = leanest_caps(P, m);
      auto step = [&](const std::vector<int>& c, double t_b) {
        std::vector<std::vector<Action>> orders;
        for (int cap : c) orders.push_back(greedy_order(m, cap));
        const Simulation sim = simulate(orders, 1, m, 1.0, t_b);
        return sim.deadlock.empty() ? sim.makespan : -1.0;
      };
      const std::vector<int> all_m(static_cast<std::size_t>(P), m);
      for (double t_b : {1.0, 2.0}) ASSERT_EQ(step(caps, t_b), step(all_m, t_b)) << "the test's search, " << where(P, m);
      for (int s = 0; s < P; ++s) {
        if (caps[static_cast<std::size_t>(s)] == 1) continue;
        std::vector<int> lower = caps;
        --lower[static_cast<std::size_t>(s)];
        const double unit = step(lower, 1.0), twice = step(lower, 2.0);
        ASSERT_TRUE(unit < 0 || twice < 0 || unit > step(all_m, 1.0) || twice > step(all_m, 2.0))
            << "the test's search, " << where(P, m) << ": stage " << s << "'s cap can be lowered";
      }
      for (int s = 0; s < P; ++s) {
        EXPECT_EQ(peak_in_flight(lab07::gpipe_schedule(P, s, m)), m) << "GPipe, stage " << s << ", " << where(P, m);
        EXPECT_EQ(peak_in_flight(lab07::one_f_one_b_schedule(P, s, m)), caps[static_cast<std::size_t>(s)])
            << "1F1B, stage " << s << ", " << where(P, m) << ": " << text(lab07::one_f_one_b_schedule(P, s, m));
      }
    }
  }
}

// The test's own 1F1B (the greedy order under the searched caps, pipeline_test_util.h)
// is the schedule the executor tests run. 1F1B's shape (Note [GPipe and 1F1B]: warm-up
// forwards, then one F and one B in turn, then the backwards left) with a given peak in
// flight is exactly that greedy order, so the student's must equal it action for action;
// the failure shows both orders.
TEST(Schedules, OneFOneBMatchesTheTestsOwnOrder) {
  for (int P = 1; P <= 6; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m = 1; m <= 9; ++m) {
        EXPECT_EQ(text(lab07::one_f_one_b_schedule(P, s, m)), text(one_f_one_b_order(P, s, m)))
            << "P = " << P << ", stage " << s << ", m = " << m;
      }
    }
  }
}

void expect_invalid(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no dtl::InvalidArgument naming '" << argument << "'";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(comm().rank())), std::string::npos) << e.what();
  }
}

TEST(Schedules, BadArgumentsAreNamed) {
  expect_invalid([] { lab07::gpipe_schedule(0, 0, 4); }, "stages");
  expect_invalid([] { lab07::gpipe_schedule(3, 3, 4); }, "stage");
  expect_invalid([] { lab07::one_f_one_b_schedule(3, -1, 4); }, "stage");
  expect_invalid([] { lab07::one_f_one_b_schedule(3, 0, 0); }, "micro_batches");
  expect_invalid([] { lab07::gpipe_schedule(2, 0, lab07::kMaxMicroBatches + 1); }, "micro_batches");
}

// ---------------------------------------------------------------------------
// Task A: balancing
// ---------------------------------------------------------------------------

/// The smallest largest-stage cost over every cut, by enumeration (integer costs: exact).
double brute_force_best(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> bounds(static_cast<std::size_t>(stages) + 1);
  // Enumerate the stages-1 inner bounds as a strictly increasing sequence in [1, n-1].
  std::function<void(int, int)> rec = [&](int s, int from) {
    if (s == stages) {
      bounds[0] = 0;
      bounds[static_cast<std::size_t>(stages)] = n;
      double largest = 0.0;
      for (int k = 0; k < stages; ++k) {
        double c = 0.0;
        for (int u = bounds[static_cast<std::size_t>(k)]; u < bounds[static_cast<std::size_t>(k) + 1]; ++u) c += costs[u];
        largest = std::max(largest, c);
      }
      best = std::min(best, largest);
      return;
    }
    for (int b = from; b <= n - (stages - s); ++b) {
      bounds[static_cast<std::size_t>(s)] = b;
      rec(s + 1, b + 1);
    }
  };
  if (stages == 1) {
    double total = 0.0;
    for (double c : costs) total += c;
    return total;
  }
  rec(1, 1);
  return best;
}

::testing::AssertionResult is_optimal_cut(const std::vector<double>& costs, int stages,
                                          const std::vector<int>& bounds) {
  const int n = static_cast<int>(costs.size());
  if (bounds.size() != static_cast<std::size_t>(stages) + 1 || bounds.front() != 0 || bounds.back() != n) {
    return ::testing::AssertionFailure() << "bounds must be P + 1 = " << stages + 1 << " values from 0 to " << n;
  }
  double largest = 0.0;
  for (int s = 0; s < stages; ++s) {
    if (bounds[static_cast<std::size_t>(s)] >= bounds[static_cast<std::size_t>(s) + 1]) {
      return ::testing::AssertionFailure() << "stage " << s << " is empty";
    }
    double c = 0.0;
    for (int u = bounds[static_cast<std::size_t>(s)]; u < bounds[static_cast<std::size_t>(s) + 1]; ++u) c += costs[u];
    largest = std::max(largest, c);
  }
  const double best = brute_force_best(costs, stages);
  if (largest != best) {
    return ::testing::AssertionFailure() << "the largest stage costs " << largest << ", but a cut with " << best
                                         << " exists";
  }
  return ::testing::AssertionSuccess();
}

std::string show(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return "{" + out + "}";
}

TEST(BalanceStages, WorkedExample) {
  const std::vector<double> costs{1, 1, 1, 4, 1};
  const std::vector<int> bounds = lab07::balance_stages(costs, 3);
  EXPECT_TRUE(is_optimal_cut(costs, 3, bounds)) << show(bounds);
  EXPECT_EQ(bounds, (std::vector<int>{0, 3, 4, 5}));  // the only cut with largest stage 4
}

TEST(BalanceStages, OneStageAndOneUnitPerStage) {
  const std::vector<double> costs{3, 1, 4, 1, 5};
  EXPECT_EQ(lab07::balance_stages(costs, 1), (std::vector<int>{0, 5}));
  EXPECT_EQ(lab07::balance_stages(costs, 5), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

// Time, not parameters: a GPT-like profile (cheap embedding, heavy head).
TEST(BalanceStages, HeavyHeadGetsAStageOfItsOwn) {
  const std::vector<double> costs{1, 3, 3, 3, 3, 9};
  const std::vector<int> bounds = lab07::balance_stages(costs, 3);
  EXPECT_TRUE(is_optimal_cut(costs, 3, bounds)) << show(bounds);
  EXPECT_EQ(bounds[2], 5) << show(bounds);
}

TEST(BalanceStages, MatchesBruteForceOnRandomCosts) {
  dtl::Rng rng(2026);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng.next_u64() % 8);
    std::vector<double> costs;
    for (int u = 0; u < n; ++u) costs.push_back(static_cast<double>(rng.next_u64() % 10));  // zeros too
    const int stages = 1 + static_cast<int>(rng.next_u64() % static_cast<std::uint64_t>(n));
    const std::vector<int> bounds = lab07::balance_stages(costs, stages);
    ASSERT_TRUE(is_optimal_cut(costs, stages, bounds)) << "trial " << trial << ", P = " << stages << ", cut "
                                                       << show(bounds);
  }
}

TEST(BalanceStages, BadArgumentsAreNamed) {
  const std::vector<double> costs{1, 2, 3};
  expect_invalid([&] { lab07::balance_stages(costs, 0); }, "stages");
  expect_invalid([&] { lab07::balance_stages(costs, 4); }, "stages");  // more stages than units
  const std::vector<double> negative{1, -2, 3};
  expect_invalid([&] { lab07::balance_stages(negative, 2); }, "costs");
}

TEST(StageImbalance, ClosedForm) {
  const std::vector<double> costs{1, 1, 1, 4, 1};
  EXPECT_DOUBLE_EQ(lab07::stage_imbalance(costs, std::vector<int>{0, 3, 4, 5}), 4.0 / (8.0 / 3.0));
  EXPECT_DOUBLE_EQ(lab07::stage_imbalance(costs, std::vector<int>{0, 1, 2, 5}), 6.0 / (8.0 / 3.0));
  EXPECT_DOUBLE_EQ(lab07::stage_imbalance(std::vector<double>{2, 2}, std::vector<int>{0, 1, 2}), 1.0);
  EXPECT_DOUBLE_EQ(lab07::stage_imbalance(std::vector<double>{0, 0}, std::vector<int>{0, 1, 2}), 0.0);
  EXPECT_DOUBLE_EQ(lab07::stage_imbalance(costs, std::vector<int>{0, 5}), 1.0);
  expect_invalid([&] { lab07::stage_imbalance(costs, std::vector<int>{0, 3, 3, 5}); }, "bounds");
  expect_invalid([&] { lab07::stage_imbalance(costs, std::vector<int>{1, 3, 5}); }, "bounds");
}

// A layer whose forward sleeps f seconds and whose backward sleeps b: its unit
// costs f + b, known to the test; the other units cost microseconds.
class SleepLayer final : public nn::Layer {
 public:
  SleepLayer(double forward_seconds, double backward_seconds)
      : nn::Layer("sleep"), forward_(forward_seconds), backward_(backward_seconds) {}
  std::string kind() const override { return "Sleep"; }
  const nn::Tensor& forward(const nn::Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(forward_));
    return x;
  }
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn&) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(backward_));
    return dy;
  }
  nn::Shape output_shape(const nn::Shape& input) const override { return input; }
  void release_slot(int) override {}

 private:
  double forward_, backward_;
};

TEST(UnitCosts, MeasuresEachUnitsForwardPlusBackward) {
  dtl::Rng rng(5);
  nn::Model model;
  {
    std::vector<std::unique_ptr<nn::Layer>> l;
    l.push_back(std::make_unique<nn::Linear>("fc0", 2, 8, nn::DType::kF32, rng));
    model.add_unit("fc0", std::move(l));
  }
  {
    std::vector<std::unique_ptr<nn::Layer>> l;
    l.push_back(std::make_unique<SleepLayer>(0.010, 0.020));
    model.add_unit("slow", std::move(l));
  }
  {
    std::vector<std::unique_ptr<nn::Layer>> l;
    l.push_back(std::make_unique<nn::Linear>("head", 8, 3, nn::DType::kF32, rng));
    model.add_unit("head", std::move(l));
  }
  int calls = 0;
  model.hooks().pre_forward = [&calls](int) { ++calls; };  // must survive the measurement
  const Batch b = make_batch(ModelKind::kMlp, 0, 6, 0, 6);
  const std::vector<double> costs = lab07::measure_unit_costs(model, b.x, b.y, 3);
  ASSERT_EQ(costs.size(), 3u);
  EXPECT_GE(costs[1], 0.030) << "the sleeping unit sleeps 10 ms forward and 20 ms backward";
  EXPECT_LT(costs[1], 0.080) << "the median of three runs of a 30 ms unit";
  EXPECT_LT(costs[0], 0.010);
  EXPECT_LT(costs[2], 0.010);
  EXPECT_GE(costs[0], 0.0);
  // The hooks are the caller's again, and no gradient is left behind.
  const int before = calls;
  model.forward(b.x);
  EXPECT_EQ(calls, before + 3) << "the model's own pre_forward hook was not restored";
  for (const nn::Parameter* p : model.parameters()) {
    for (float g : p->grad.span<float>()) ASSERT_EQ(g, 0.0f) << p->name << ": gradients left behind";
  }
  expect_invalid([&] { lab07::measure_unit_costs(model, b.x, b.y, 0); }, "repeats");
}

}  // namespace
}  // namespace lab07_test
