// Lab 07: the schedules (task B) against their closed forms, and stage balancing
// (task A) against brute force and a unit whose time the test knows.
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

// The worked example of Note [GPipe and 1F1B] and the one in schedule.cc, by hand.
TEST(Schedules, OneFOneBWorkedExamples) {
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 0, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 1, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(3, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(4, 3, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up is cut short by m.
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(4, 0, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(4, 1, 1)), "F0 B0");
  EXPECT_EQ(text(lab07::one_f_one_b_schedule(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
}

TEST(Schedules, OneFOneBMatchesTheClosedForm) {
  for (int P = 1; P <= 6; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m = 1; m <= 9; ++m) {
        EXPECT_EQ(text(lab07::one_f_one_b_schedule(P, s, m)), text(one_f_one_b_order(P, s, m)))
            << "P = " << P << ", stage " << s << ", m = " << m;
      }
    }
  }
}

// Activation memory in micro-batches: the peak each schedule keeps in flight (handout, section (c)).
TEST(Schedules, InFlightMicroBatches) {
  for (int P = 1; P <= 5; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m = 1; m <= 9; ++m) {
        EXPECT_EQ(peak_in_flight(lab07::gpipe_schedule(P, s, m)), m);
        EXPECT_EQ(peak_in_flight(lab07::one_f_one_b_schedule(P, s, m)), std::min(m, P - s))
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
