// Lab 07, task A: cutting a model into stages by measured time.
//
// What this file teaches: a pipeline runs at the pace of its slowest stage, so
// the cut that matters is the one that balances *time*. Parameters are a poor
// proxy (See Note [Balancing stages] in lab07/pipeline.h): measure each unit's
// forward and backward with the model's hooks, then solve the linear-partition
// problem on those times.
//
// Worked example (balance_stages): costs {1, 1, 1, 4, 1}, P = 3.
//
//     cut            stage costs   largest
//     {0,1,2,5}      1 1 6         6
//     {0,2,3,5}      2 1 5         5
//     {0,3,4,5}      3 4 1         4     <- the best: unit 3 alone costs 4 already
//
// and stage_imbalance = 4 / (8 / 3) = 1.5: the pipeline runs 1.5 times slower
// than a perfectly balanced one would.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

std::vector<double> measure_unit_costs(nn::Model& model, const nn::Tensor& x, const nn::Tensor& targets,
                                       int repeats) {
  DTL_REQUIRE_ARG(repeats >= 1, "measure_unit_costs", "repeats", "must be at least 1, not " + std::to_string(repeats));
  const int units = model.unit_count();
  std::vector<double> costs(static_cast<std::size_t>(units), 0.0);
  // BEGIN SOLUTION(measure_unit_costs)
  // | Fill `costs` (returned below) with, per unit, the median over `repeats` full steps
  // | (forward, the SoftmaxCrossEntropy loss on targets, backward) of that unit's forward
  // | time plus its backward time, measured with clock_seconds() from the model's hooks. On
  // | return, also after an exception, the model's hooks are as they were and its gradients
  // | are zero (handout Task A, Note [Balancing stages]; a unit that sleeps 10 ms forward and
  // | 20 ms backward must measure 30 ms).
  const nn::ModelHooks saved = model.hooks();
  std::vector<std::vector<double>> runs(static_cast<std::size_t>(units));  // per unit, per run
  std::vector<double> begin(static_cast<std::size_t>(units), 0.0), spent(static_cast<std::size_t>(units), 0.0);
  auto start = [&](int unit) { begin[static_cast<std::size_t>(unit)] = clock_seconds(); };
  auto stop = [&](int unit) {
    spent[static_cast<std::size_t>(unit)] += clock_seconds() - begin[static_cast<std::size_t>(unit)];
  };
  nn::ModelHooks& hooks = model.hooks();
  hooks.pre_forward = start;
  hooks.post_forward = stop;
  hooks.pre_backward = start;
  hooks.post_backward = stop;
  try {
    nn::SoftmaxCrossEntropy loss;
    for (int r = 0; r < repeats; ++r) {
      std::fill(spent.begin(), spent.end(), 0.0);
      loss.forward(model.forward(x), targets);
      model.backward(loss.backward());
      for (int u = 0; u < units; ++u) runs[static_cast<std::size_t>(u)].push_back(spent[static_cast<std::size_t>(u)]);
    }
  } catch (...) {
    model.hooks() = saved;
    throw;
  }
  model.hooks() = saved;
  model.zero_grad();
  for (int u = 0; u < units; ++u) {
    std::vector<double>& times = runs[static_cast<std::size_t>(u)];
    std::sort(times.begin(), times.end());
    const std::size_t n = times.size();
    costs[static_cast<std::size_t>(u)] = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  }
  // END SOLUTION
  return costs;
}

std::vector<int> balance_stages(std::span<const double> costs, int stages) {
  const int n = static_cast<int>(costs.size());
  DTL_REQUIRE_ARG(stages >= 1 && stages <= n, "balance_stages", "stages",
                  "is " + std::to_string(stages) + "; it must be in [1, " + std::to_string(n) +
                      "]: a stage needs at least one unit, and there are " + std::to_string(n));
  for (int u = 0; u < n; ++u) {
    DTL_REQUIRE_ARG(std::isfinite(costs[static_cast<std::size_t>(u)]) && costs[static_cast<std::size_t>(u)] >= 0.0,
                    "balance_stages", "costs",
                    "[" + std::to_string(u) + "] is " + std::to_string(costs[static_cast<std::size_t>(u)]) +
                        "; costs must be finite and >= 0");
  }
  std::vector<int> bounds(static_cast<std::size_t>(stages) + 1, 0);
  // BEGIN SOLUTION(balance_stages)
  // | Fill `bounds` (P + 1 of them, returned below) so that they cut the units into `stages`
  // | contiguous, non-empty stages whose largest stage cost is the smallest possible (any
  // | optimal cut; the header's example must come out; tests compare with brute force on
  // | random costs). Argument checks are written above (handout Task A, Note [Balancing
  // | stages]).
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int u = 0; u < n; ++u) {
    prefix[static_cast<std::size_t>(u) + 1] = prefix[static_cast<std::size_t>(u)] + costs[static_cast<std::size_t>(u)];
  }
  const double inf = std::numeric_limits<double>::infinity();
  const auto width = static_cast<std::size_t>(n) + 1;
  std::vector<double> best((static_cast<std::size_t>(stages) + 1) * width, inf);
  std::vector<int> cut((static_cast<std::size_t>(stages) + 1) * width, 0);
  auto at = [width](int s, int i) { return static_cast<std::size_t>(s) * width + static_cast<std::size_t>(i); };
  best[at(0, 0)] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {  // the last of the s stages is units [j, i)
        const double stage_cost = prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(j)];
        const double candidate = std::max(best[at(s - 1, j)], stage_cost);
        if (candidate < best[at(s, i)]) {
          best[at(s, i)] = candidate;
          cut[at(s, i)] = j;
        }
      }
    }
  }
  bounds[static_cast<std::size_t>(stages)] = n;
  for (int s = stages; s >= 1; --s) {
    bounds[static_cast<std::size_t>(s) - 1] = cut[at(s, bounds[static_cast<std::size_t>(s)])];
  }
  // END SOLUTION
  return bounds;
}

double stage_imbalance(std::span<const double> costs, std::span<const int> bounds) {
  const int n = static_cast<int>(costs.size());
  DTL_REQUIRE_ARG(bounds.size() >= 2 && bounds.front() == 0 && bounds.back() == n, "stage_imbalance", "bounds",
                  "must start at 0 and end at " + std::to_string(n) + " (the unit count)");
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    DTL_REQUIRE_ARG(bounds[s] < bounds[s + 1], "stage_imbalance", "bounds",
                    "is not strictly increasing at stage " + std::to_string(s) + ": every stage needs a unit");
  }
  // BEGIN SOLUTION(stage_imbalance)
  // | Return the largest stage's cost over the mean stage cost for these bounds (1 is perfect
  // | balance), or 0 when every cost is 0, as the header says.
  const int stages = static_cast<int>(bounds.size()) - 1;
  double total = 0.0, largest = 0.0;
  for (int s = 0; s < stages; ++s) {
    double stage_cost = 0.0;
    for (int u = bounds[static_cast<std::size_t>(s)]; u < bounds[static_cast<std::size_t>(s) + 1]; ++u) {
      stage_cost += costs[static_cast<std::size_t>(u)];
    }
    total += stage_cost;
    largest = std::max(largest, stage_cost);
  }
  return total == 0.0 ? 0.0 : largest / (total / stages);
  // END SOLUTION
}

}  // namespace dtl::lab07
