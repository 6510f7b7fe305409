// The training labs' shared test fixtures: see training_fixtures.h.
#include "harness/testing/training_fixtures.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "harness/testing/mpi_test.h"

namespace dtl::testing {

const char* model_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return "mlp";
    case ModelKind::kOddMlp: return "odd_mlp";
    case ModelKind::kGpt: return "gpt";
  }
  return "?";
}

const char* opt_name(OptKind kind) { return kind == OptKind::kSgd ? "sgd" : "adamw"; }

void PrintTo(ModelKind kind, std::ostream* os) { *os << model_name(kind); }
void PrintTo(OptKind kind, std::ostream* os) { *os << opt_name(kind); }

namespace {

// " (at [i, j, k] of 2 x 3 x 4)": element `flat` of a row-major `shape`, or "" when
// the shape does not describe `count` elements (or has one dimension: nothing to add).
std::string shaped_index(std::size_t flat, std::size_t count, const std::vector<std::int64_t>& shape) {
  std::int64_t product = 1;
  for (std::int64_t d : shape) product *= d;
  if (shape.size() < 2 || product != static_cast<std::int64_t>(count)) return "";
  std::vector<std::int64_t> index(shape.size());
  auto rest = static_cast<std::int64_t>(flat);
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = rest % shape[d];
    rest /= shape[d];
  }
  std::string at = " (at [", dims;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    at += (d ? ", " : "") + std::to_string(index[d]);
    dims += (d ? " x " : "") + std::to_string(shape[d]);
  }
  return at + "] of " + dims + ")";
}

template <typename T>
::testing::AssertionResult close_to_impl(const std::vector<T>& want, const std::vector<T>& got,
                                         const std::string& what, Tolerance tol, const std::string& oracle,
                                         std::int64_t offset, const std::vector<std::int64_t>& shape) {
  const int rank = comm().rank();
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "rank " << rank << ": " << what << " has " << got.size()
                                         << " elements, expected " << want.size() << " (" << oracle << ")";
  }
  std::size_t wrong = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    worst = std::max(worst, std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff);
    if (!(diff <= tol.abs + tol.rel * std::fabs(static_cast<double>(want[i])))) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << rank << ": " << what << "["
                                       << static_cast<std::int64_t>(first) + offset << "]"
                                       << shaped_index(first, want.size(), shape) << " expected " << want[first]
                                       << " (" << oracle << ") got " << got[first] << " (" << wrong << " of "
                                       << want.size() << " elements differ by more than " << tol.abs << " + "
                                       << tol.rel << " |expected|; largest difference " << worst << ")";
}

}  // namespace

::testing::AssertionResult close_to(const std::vector<float>& want, const std::vector<float>& got,
                                    const std::string& what, Tolerance tol, const std::string& oracle,
                                    std::int64_t offset, const std::vector<std::int64_t>& shape) {
  return close_to_impl(want, got, what, tol, oracle, offset, shape);
}

::testing::AssertionResult close_to(const std::vector<double>& want, const std::vector<double>& got,
                                    const std::string& what, Tolerance tol, const std::string& oracle,
                                    std::int64_t offset, const std::vector<std::int64_t>& shape) {
  return close_to_impl(want, got, what, tol, oracle, offset, shape);
}

}  // namespace dtl::testing
