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
  // TODO(student): Save model.hooks() and install pre/post forward and backward hooks that read
  //   clock_seconds() around each unit. Run `repeats` steps (forward, a
  //   SoftmaxCrossEntropy loss on targets, backward); per run and unit, record the
  //   forward time plus the backward time. Restore the hooks (also if a step
  //   throws), zero the gradients, and return each unit's median over the runs.
  throw dtl::NotImplemented("measure_unit_costs");
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
  // TODO(student): Dynamic programming on prefix sums: best[s][i] = the smallest possible largest
  //   stage cost when units [0, i) form s stages, = min over j of
  //   max(best[s-1][j], cost of units [j, i)); remember the j that achieved it and
  //   walk back from best[stages][n] to the bounds. (Or binary-search the answer
  //   with a greedy check.) Each stage must get at least one unit.
  throw dtl::NotImplemented("balance_stages");
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
  // TODO(student): Sum the costs of each stage [bounds[s], bounds[s+1]); return the largest over the
  //   mean (total / P), or 0 when the total is 0.
  throw dtl::NotImplemented("stage_imbalance");
}

}  // namespace dtl::lab07
