// Synthetic classification sets: spirals and Gaussian blobs, and the two row
// operations every training loop needs (split into train/test, gather a batch).
//
// What this file teaches: a data set for a distributed-training lab must be
// (1) the same on every rank and every machine, so that a 4-rank run can be
// compared with a 1-rank run bit for bit — hence one portable Rng and nothing
// else random; (2) learnable to a *known* accuracy, so that "the loss went down"
// can become "the model reached 95%, as it should". Both generators interleave
// the classes (row i has class i % classes) and draw each row independently,
// so any contiguous block of rows — a test split, a rank's shard — is a fair
// sample.
//
// Arithmetic is in double and rounded to float once, at the end of each value
// (see random.h on why that makes the bits portable).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "datasets/datasets.h"

namespace dtl::data {
namespace {

/// Throws unless `data` satisfies the Classification invariants (shapes only:
/// checking every label costs a pass over y, which take() does anyway).
void require_consistent(const Classification& data, const char* function) {
  const bool shapes_ok = data.count >= 0 && data.features >= 0 &&
                         data.x.size() == static_cast<size_t>(data.count * data.features) &&
                         data.y.size() == static_cast<size_t>(data.count);
  DTL_REQUIRE_ARG(shapes_ok, function, "data",
                  "is inconsistent: count " + std::to_string(data.count) + ", features " +
                      std::to_string(data.features) + ", x.size() " +
                      std::to_string(data.x.size()) + ", y.size() " +
                      std::to_string(data.y.size()) + " (want x.size() == count * features)");
}

/// The class means of make_blobs(): the first classes * features uniforms of `rng`.
std::vector<double> draw_centers(Rng& rng, int64_t features, int64_t classes) {
  std::vector<double> centers(static_cast<size_t>(classes * features));
  for (double& v : centers) v = kBlobCenterRange * (2.0 * rng.uniform() - 1.0);
  return centers;
}

/// An empty Classification with room for `count` rows.
Classification with_shape(int64_t count, int64_t features, int64_t classes) {
  Classification out;
  out.count = count;
  out.features = features;
  out.classes = classes;
  out.x.resize(static_cast<size_t>(count * features));
  out.y.resize(static_cast<size_t>(count));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Spirals
// ---------------------------------------------------------------------------

Classification make_spirals(int64_t count, int64_t classes, float noise, uint64_t seed) {
  DTL_REQUIRE_ARG(count >= 0, "make_spirals", "count", "is " + std::to_string(count) + "; need >= 0");
  DTL_REQUIRE_ARG(classes >= 2, "make_spirals", "classes",
                  "is " + std::to_string(classes) + "; need >= 2");
  DTL_REQUIRE_ARG(std::isfinite(noise) && noise >= 0.0f, "make_spirals", "noise",
                  "is " + std::to_string(noise) + "; need a finite value >= 0");

  Classification out = with_shape(count, 2, classes);
  Rng rng(seed);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = i % classes;
    // Radius uniform on [inner, 1): the same number of points per unit of
    // radius, so the outer (well separated) and inner parts are equally covered.
    const double r = kSpiralInnerRadius + (1.0 - kSpiralInnerRadius) * rng.uniform();
    const double theta = 2.0 * std::numbers::pi * (static_cast<double>(c) / classes + kSpiralTurns * r);
    const double dx = noise * rng.normal();
    const double dy = noise * rng.normal();
    out.x[2 * i] = static_cast<float>(r * std::cos(theta) + dx);
    out.x[2 * i + 1] = static_cast<float>(r * std::sin(theta) + dy);
    out.y[i] = static_cast<int32_t>(c);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Blobs
// ---------------------------------------------------------------------------

std::vector<double> blob_centers(int64_t features, int64_t classes, uint64_t seed) {
  DTL_REQUIRE_ARG(features >= 1, "blob_centers", "features",
                  "is " + std::to_string(features) + "; need >= 1");
  DTL_REQUIRE_ARG(classes >= 2, "blob_centers", "classes",
                  "is " + std::to_string(classes) + "; need >= 2");
  Rng rng(seed);
  return draw_centers(rng, features, classes);
}

Classification make_blobs(int64_t count, int64_t features, int64_t classes, float spread,
                          uint64_t seed) {
  DTL_REQUIRE_ARG(count >= 0, "make_blobs", "count", "is " + std::to_string(count) + "; need >= 0");
  DTL_REQUIRE_ARG(features >= 1, "make_blobs", "features",
                  "is " + std::to_string(features) + "; need >= 1");
  DTL_REQUIRE_ARG(classes >= 2, "make_blobs", "classes",
                  "is " + std::to_string(classes) + "; need >= 2");
  DTL_REQUIRE_ARG(std::isfinite(spread) && spread >= 0.0f, "make_blobs", "spread",
                  "is " + std::to_string(spread) + "; need a finite value >= 0");

  // The means first, exactly as blob_centers() draws them; the points continue
  // the same stream, row by row, feature by feature.
  Rng rng(seed);
  const std::vector<double> centers = draw_centers(rng, features, classes);

  Classification out = with_shape(count, features, classes);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = i % classes;
    for (int64_t f = 0; f < features; ++f) {
      out.x[i * features + f] = static_cast<float>(centers[c * features + f] + spread * rng.normal());
    }
    out.y[i] = static_cast<int32_t>(c);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Recommended settings (the numbers behind them: datasets/README.md)
// ---------------------------------------------------------------------------

SpiralSettings recommended_spirals() {
  return {.count = 3000, .classes = 3, .noise = 0.05f, .seed = 1, .test_fraction = 0.2};
}

BlobSettings recommended_blobs() {
  return {.count = 2000, .features = 8, .classes = 4, .spread = 1.75f, .seed = 1,
          .test_fraction = 0.2};
}

Classification make_spirals(const SpiralSettings& settings) {
  return make_spirals(settings.count, settings.classes, settings.noise, settings.seed);
}

Classification make_blobs(const BlobSettings& settings) {
  return make_blobs(settings.count, settings.features, settings.classes, settings.spread,
                    settings.seed);
}

// ---------------------------------------------------------------------------
// Row operations
// ---------------------------------------------------------------------------

std::pair<Classification, Classification> split(const Classification& data,
                                                double test_fraction) {
  DTL_REQUIRE_ARG(test_fraction >= 0.0 && test_fraction < 1.0, "split", "test_fraction",
                  "is " + std::to_string(test_fraction) + "; need a value in [0, 1)");
  require_consistent(data, "split");
  // Rounded, not truncated: 0.29 * 100 is 28.999999999999996 in binary.
  const int64_t test_rows = std::llround(test_fraction * static_cast<double>(data.count));
  const int64_t train_rows = data.count - test_rows;

  auto rows = [&](int64_t first, int64_t n) {
    Classification part = with_shape(n, data.features, data.classes);
    std::copy_n(data.x.begin() + first * data.features, n * data.features, part.x.begin());
    std::copy_n(data.y.begin() + first, n, part.y.begin());
    return part;
  };
  return {rows(0, train_rows), rows(train_rows, test_rows)};
}

Classification take(const Classification& data, std::span<const int64_t> indices) {
  require_consistent(data, "take");
  const auto n = static_cast<int64_t>(indices.size());
  Classification out = with_shape(n, data.features, data.classes);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = indices[k];
    DTL_REQUIRE_ARG(row >= 0 && row < data.count, "take", "indices",
                    "has " + std::to_string(row) + " at position " + std::to_string(k) +
                        "; need a row in [0, " + std::to_string(data.count) + ")");
    std::copy_n(data.x.begin() + row * data.features, data.features,
                out.x.begin() + k * data.features);
    out.y[k] = data.y[row];
  }
  return out;
}


void copy_rows(const Classification& data, int64_t first, std::span<float> x, std::span<int32_t> y) {
  const auto rows = static_cast<int64_t>(y.size());
  DTL_REQUIRE_ARG(data.count > 0 && data.features > 0, "copy_rows", "data", "is empty");
  DTL_REQUIRE_ARG(first >= 0, "copy_rows", "first", "is " + std::to_string(first) + ", below 0");
  DTL_REQUIRE_ARG(static_cast<int64_t>(x.size()) == rows * data.features, "copy_rows", "x",
                  "holds " + std::to_string(x.size()) + " values; " + std::to_string(rows) + " rows of " +
                      std::to_string(data.features) + " features need " + std::to_string(rows * data.features));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = (first + r) % data.count;
    std::copy_n(data.x.begin() + row * data.features, data.features, x.begin() + r * data.features);
    y[static_cast<std::size_t>(r)] = data.y[static_cast<std::size_t>(row)];
  }
}

}  // namespace dtl::data
