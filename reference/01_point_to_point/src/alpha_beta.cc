// Lab 01, task D: fitting the alpha-beta (latency-bandwidth) model.
//
// What this file teaches: the model that every cost in this course is written
// in. Sending n bytes takes
//
//     t(n) = alpha + beta * n
//
// alpha: the fixed cost of any message (software overhead, a trip through the
//        network stack or the shared-memory queue), seconds;
// beta:  the cost of each byte, seconds per byte; 1/beta is the bandwidth.
//
// Fit by weighted least squares with weight 1/t_i^2, i.e. minimize the relative
// error. Measured times span five orders of magnitude (a microsecond for 8 B, a
// millisecond for 4 MiB); unweighted least squares would fit the big messages
// and could even make alpha negative.
//
// The normal equations of  min sum_i w_i (alpha + beta n_i - t_i)^2  are
//
//     [ S   Sn  ] [alpha]   [ St  ]      S = sum w,  Sn = sum w n,  Snn = sum w n^2,
//     [ Sn  Snn ] [beta ] = [ Snt ]      St = sum w t,  Snt = sum w n t.
//
// Solved here in centred form (n measured from its weighted mean), which avoids
// subtracting two huge, nearly equal numbers when sizes reach megabytes.
#include <cmath>
#include <string>

#include "harness/error.h"
#include "lab01/point_to_point.h"

namespace dtl::lab01 {

AlphaBeta fit_alpha_beta(std::span<const Sample> samples) {
  DTL_REQUIRE_ARG(samples.size() >= 2, "fit_alpha_beta", "samples",
                  "holds " + std::to_string(samples.size()) + " sample(s); a line needs at least 2");
  bool two_sizes = false;
  for (const Sample& s : samples) {
    DTL_REQUIRE_ARG(std::isfinite(s.seconds) && s.seconds > 0, "fit_alpha_beta", "samples",
                    "holds a time of " + std::to_string(s.seconds) + " s for " +
                        std::to_string(s.bytes) + " B; every time must be positive and finite");
    two_sizes = two_sizes || s.bytes != samples[0].bytes;
  }
  DTL_REQUIRE_ARG(two_sizes, "fit_alpha_beta", "samples",
                  "has only one message size; alpha and beta need at least two");

  // BEGIN SOLUTION(fit_alpha_beta)
  // | Return AlphaBeta{alpha, beta} (seconds, seconds per byte) of the line alpha + beta * n
  // | that minimizes the summed squared RELATIVE error over the samples (handout Task D,
  // | section (c); the normal equations are at the top of this file). Points exactly on a
  // | line come back to a relative 1e-9; sizes up to megabytes must not overflow or lose
  // | precision. Bad samples are rejected above; nothing else to throw.
  // Weighted means of size and time.
  double sum_w = 0.0, mean_n = 0.0, mean_t = 0.0;
  for (const Sample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    sum_w += w;
    mean_n += w * static_cast<double>(s.bytes);
    mean_t += w * s.seconds;
  }
  mean_n /= sum_w;
  mean_t /= sum_w;

  // Slope from the centred sums: beta = sum w dn dt / sum w dn^2.
  double s_nn = 0.0, s_nt = 0.0;
  for (const Sample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    const double dn = static_cast<double>(s.bytes) - mean_n;
    s_nn += w * dn * dn;
    s_nt += w * dn * (s.seconds - mean_t);
  }
  const double beta = s_nt / s_nn;
  // The weighted line passes through the weighted means.
  const double alpha = mean_t - beta * mean_n;
  return AlphaBeta{alpha, beta};
  // END SOLUTION
}

}  // namespace dtl::lab01
