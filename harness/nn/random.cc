// Box-Muller: two uniforms in, one normal out.
#include "harness/nn/random.h"

#include <cmath>
#include <numbers>

namespace dtl::nn {

double Rng::normal(double mean, double stddev) noexcept {
  // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  return mean + stddev * radius * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace dtl::nn
