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
  // TODO(student): Fill `costs` (returned below) with, per unit, the median over `repeats` full steps
  //   (forward, the SoftmaxCrossEntropy loss on targets, backward) of that unit's forward
  //   time plus its backward time, measured with clock_seconds() from the model's hooks. On
  //   return, also after an exception, the model's hooks are as they were and its gradients
  //   are zero (handout Task A, Note [Balancing stages]; a unit that sleeps 10 ms forward and
  //   20 ms backward must measure 30 ms).
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
  // TODO(student): Fill `bounds` (P + 1 of them, returned below) so that they cut the units into `stages`
  //   contiguous, non-empty stages whose largest stage cost is the smallest possible (any
  //   optimal cut; the header's example must come out; tests compare with brute force on
  //   random costs). Argument checks are written above (handout Task A, Note [Balancing
  //   stages]).
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
  // TODO(student): Return the largest stage's cost over the mean stage cost for these bounds (1 is perfect
  //   balance), or 0 when every cost is 0, as the header says.
  throw dtl::NotImplemented("stage_imbalance");
}

}  // namespace dtl::lab07
