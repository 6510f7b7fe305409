// Spirals, blobs, split() and take(), each against an oracle that does not use
// the code under test: the closed-form geometry of the documented formulas,
// classifiers that need no training (k nearest neighbours, nearest true mean),
// sample statistics, and golden hashes that pin the exact bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "datasets/datasets.h"

namespace dtl::data {
namespace {

/// FNV-1a over the bytes of a vector: a golden value that any change of bits shows.
template <typename T>
uint64_t fnv1a(const std::vector<T>& values) {
  uint64_t h = 14695981039346656037ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(T); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/// Expects `call` to throw dtl::InvalidArgument whose message names `argument`.
template <typename F>
void expect_invalid(F&& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no exception; expected InvalidArgument naming '" << argument << "'";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + argument + "'"), std::string::npos) << e.what();
  }
}

double squared_distance(const Classification& a, int64_t i, const Classification& b, int64_t j) {
  double s = 0;
  for (int64_t f = 0; f < a.features; ++f) {
    const double d = double{a.x[i * a.features + f]} - b.x[j * b.features + f];
    s += d * d;
  }
  return s;
}

/// Accuracy on `test` of a k-nearest-neighbour vote over `train` (ties: lowest label).
double knn_accuracy(const Classification& train, const Classification& test, int k) {
  int64_t correct = 0;
  std::vector<std::pair<double, int32_t>> neighbours(static_cast<size_t>(train.count));
  for (int64_t i = 0; i < test.count; ++i) {
    for (int64_t j = 0; j < train.count; ++j) {
      neighbours[j] = {squared_distance(test, i, train, j), train.y[j]};
    }
    std::partial_sort(neighbours.begin(), neighbours.begin() + k, neighbours.end());
    std::vector<int> votes(static_cast<size_t>(train.classes), 0);
    for (int q = 0; q < k; ++q) ++votes[neighbours[q].second];
    const auto predicted = std::max_element(votes.begin(), votes.end()) - votes.begin();
    correct += predicted == test.y[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test.count);
}

/// Accuracy of assigning each row to the nearest of `means` ((classes, features)).
double nearest_mean_accuracy(const Classification& data, const std::vector<double>& means) {
  int64_t correct = 0;
  for (int64_t i = 0; i < data.count; ++i) {
    int64_t best = 0;
    double best_d = INFINITY;
    for (int64_t c = 0; c < data.classes; ++c) {
      double d = 0;
      for (int64_t f = 0; f < data.features; ++f) {
        const double t = data.x[i * data.features + f] - means[c * data.features + f];
        d += t * t;
      }
      if (d < best_d) {
        best_d = d;
        best = c;
      }
    }
    correct += best == data.y[i];
  }
  return static_cast<double>(correct) / static_cast<double>(data.count);
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

TEST(Synthetic, BadArgumentsNameTheArgument) {
  expect_invalid([] { make_spirals(-1, 3, 0.1f, 1); }, "count");
  expect_invalid([] { make_spirals(10, 1, 0.1f, 1); }, "classes");
  expect_invalid([] { make_spirals(10, 3, -0.1f, 1); }, "noise");
  expect_invalid([] { make_spirals(10, 3, NAN, 1); }, "noise");
  expect_invalid([] { make_blobs(-5, 2, 3, 1.0f, 1); }, "count");
  expect_invalid([] { make_blobs(10, 0, 3, 1.0f, 1); }, "features");
  expect_invalid([] { make_blobs(10, 2, 0, 1.0f, 1); }, "classes");
  expect_invalid([] { make_blobs(10, 2, 3, -1.0f, 1); }, "spread");
  expect_invalid([] { make_blobs(10, 2, 3, INFINITY, 1); }, "spread");
  expect_invalid([] { blob_centers(2, 1, 1); }, "classes");

  const Classification data = make_blobs(10, 2, 2, 1.0f, 1);
  expect_invalid([&] { split(data, -0.1); }, "test_fraction");
  expect_invalid([&] { split(data, 1.0); }, "test_fraction");
  expect_invalid([&] { split(data, NAN); }, "test_fraction");
  const std::vector<int64_t> bad = {0, 10};
  expect_invalid([&] { take(data, bad); }, "indices");
  const std::vector<int64_t> negative = {-1};
  expect_invalid([&] { take(data, negative); }, "indices");
  Classification broken = data;
  broken.x.pop_back();
  expect_invalid([&] { split(broken, 0.5); }, "data");
  expect_invalid([&] { take(broken, std::vector<int64_t>{0}); }, "data");
}

// ---------------------------------------------------------------------------
// Spirals
// ---------------------------------------------------------------------------

TEST(Spirals, ShapesAndInterleavedLabels) {
  for (const int64_t count : {0, 1, 2, 7, 100}) {
    const Classification d = make_spirals(count, 4, 0.1f, 3);
    EXPECT_EQ(d.count, count);
    EXPECT_EQ(d.features, 2);
    EXPECT_EQ(d.classes, 4);
    ASSERT_EQ(d.x.size(), static_cast<size_t>(2 * count));
    ASSERT_EQ(d.y.size(), static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(d.y[i], i % 4) << "row " << i;
  }
}

TEST(Spirals, WithoutNoiseEveryPointLiesOnItsArm) {
  // The documented curve: radius in [inner, 1), angle 2 pi (c/K + turns * r).
  const int64_t classes = 5;
  const Classification d = make_spirals(1000, classes, 0.0f, 11);
  for (int64_t i = 0; i < d.count; ++i) {
    const double px = d.x[2 * i];
    const double py = d.x[2 * i + 1];
    const double r = std::hypot(px, py);
    EXPECT_GE(r, kSpiralInnerRadius - 1e-6);
    EXPECT_LT(r, 1.0 + 1e-6);
    const double theta = 2.0 * std::numbers::pi *
                         (static_cast<double>(d.y[i]) / classes + kSpiralTurns * r);
    EXPECT_NEAR(px, r * std::cos(theta), 2e-6) << "row " << i;
    EXPECT_NEAR(py, r * std::sin(theta), 2e-6) << "row " << i;
  }
}

TEST(Spirals, NoiseIsGaussianWithTheRequestedDeviation) {
  // Same seed: the same radii (the first draw of each row), so noisy - clean
  // is exactly the noise term.
  const float noise = 0.07f;
  const Classification clean = make_spirals(20000, 3, 0.0f, 5);
  const Classification noisy = make_spirals(20000, 3, noise, 5);
  double sum = 0;
  double sum_sq = 0;
  for (size_t i = 0; i < clean.x.size(); ++i) {
    const double e = double{noisy.x[i]} - clean.x[i];
    sum += e;
    sum_sq += e * e;
  }
  const auto n = static_cast<double>(clean.x.size());
  EXPECT_NEAR(sum / n, 0.0, 5 * noise / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(sum_sq / n), noise, 0.02 * noise);
}

TEST(Spirals, RecommendedSettingsAreLearnableByNearestNeighbours) {
  const SpiralSettings s = recommended_spirals();
  EXPECT_EQ(s.classes, 3);
  const auto [train, test] = split(make_spirals(s), s.test_fraction);
  const double accuracy = knn_accuracy(train, test, 5);
  std::cout << "[ measured ] recommended spirals: 5-NN train->test accuracy " << accuracy
            << " (" << test.count << " test rows)\n";
  RecordProperty("knn5_accuracy", std::to_string(accuracy));
  EXPECT_GE(accuracy, 0.97);
}

TEST(Spirals, SameSeedSameBitsOtherSeedOtherData) {
  const Classification a = make_spirals(500, 3, 0.05f, 42);
  const Classification b = make_spirals(500, 3, 0.05f, 42);
  const Classification c = make_spirals(500, 3, 0.05f, 43);
  EXPECT_EQ(0, std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)));
  EXPECT_EQ(a.y, b.y);
  int64_t same = 0;
  for (size_t i = 0; i < a.x.size(); ++i) same += a.x[i] == c.x[i];
  EXPECT_EQ(same, 0);
}

TEST(Spirals, GoldenBits) {
  // Pins the RNG, the draw order and the formula. If this fails after a
  // deliberate change, update the values and say so in the commit: every
  // recorded loss curve changes with them.
  const Classification d = make_spirals(recommended_spirals());
  EXPECT_EQ(fnv1a(d.x), 5631989948389881842ULL) << "x hash";
  EXPECT_EQ(fnv1a(d.y), 17167329316666151013ULL) << "y hash";
}

// ---------------------------------------------------------------------------
// Blobs
// ---------------------------------------------------------------------------

TEST(Blobs, CentersAreInTheDocumentedBoxAndPointsSpreadAroundThem) {
  const int64_t features = 3;
  const int64_t classes = 4;
  const float spread = 0.5f;
  const std::vector<double> centers = blob_centers(features, classes, 8);
  ASSERT_EQ(centers.size(), static_cast<size_t>(features * classes));
  for (const double c : centers) {
    EXPECT_GE(c, -kBlobCenterRange);
    EXPECT_LT(c, kBlobCenterRange);
  }
  const int64_t count = 40000;
  const Classification d = make_blobs(count, features, classes, spread, 8);
  EXPECT_EQ(d.features, features);
  EXPECT_EQ(d.classes, classes);
  // Per class and feature: the sample mean is within 5 standard errors of the
  // centre, and the sample deviation within 3% of `spread`.
  const double per_class = static_cast<double>(count / classes);
  for (int64_t c = 0; c < classes; ++c) {
    for (int64_t f = 0; f < features; ++f) {
      double sum = 0;
      double sum_sq = 0;
      for (int64_t i = c; i < count; i += classes) {
        EXPECT_EQ(d.y[i], c);
        const double e = d.x[i * features + f] - centers[c * features + f];
        sum += e;
        sum_sq += e * e;
      }
      EXPECT_NEAR(sum / per_class, 0.0, 5 * spread / std::sqrt(per_class));
      EXPECT_NEAR(std::sqrt(sum_sq / per_class), spread, 0.03 * spread);
    }
  }
}

TEST(Blobs, ZeroSpreadPutsEveryPointOnItsCenter) {
  const std::vector<double> centers = blob_centers(2, 3, 4);
  const Classification d = make_blobs(9, 2, 3, 0.0f, 4);
  for (int64_t i = 0; i < 9; ++i) {
    for (int64_t f = 0; f < 2; ++f) {
      EXPECT_EQ(d.x[i * 2 + f], static_cast<float>(centers[(i % 3) * 2 + f]));
    }
  }
}

TEST(Blobs, RecommendedSettingsAreSeparable) {
  const BlobSettings s = recommended_blobs();
  const auto [train, test] = split(make_blobs(s), s.test_fraction);
  // The Bayes classifier for equal priors and isotropic noise: nearest true mean.
  const double bayes = nearest_mean_accuracy(test, blob_centers(s.features, s.classes, s.seed));
  // Nearest centroid, the centroids estimated from the training rows only.
  std::vector<double> centroids(static_cast<size_t>(s.classes * s.features), 0.0);
  std::vector<double> rows(static_cast<size_t>(s.classes), 0.0);
  for (int64_t i = 0; i < train.count; ++i) {
    rows[train.y[i]] += 1;
    for (int64_t f = 0; f < s.features; ++f) {
      centroids[train.y[i] * s.features + f] += train.x[i * s.features + f];
    }
  }
  for (int64_t c = 0; c < s.classes; ++c) {
    for (int64_t f = 0; f < s.features; ++f) centroids[c * s.features + f] /= rows[c];
  }
  const double fitted = nearest_mean_accuracy(test, centroids);
  std::cout << "[ measured ] recommended blobs: nearest true mean " << bayes
            << ", nearest train centroid " << fitted << " (" << test.count << " test rows)\n";
  RecordProperty("nearest_mean_accuracy", std::to_string(bayes));
  EXPECT_GE(bayes, 0.97);
  EXPECT_GE(fitted, 0.97);
}

TEST(Blobs, SameSeedSameBitsOtherSeedOtherData) {
  const Classification a = make_blobs(300, 4, 3, 1.0f, 42);
  const Classification b = make_blobs(300, 4, 3, 1.0f, 42);
  const Classification c = make_blobs(300, 4, 3, 1.0f, 43);
  EXPECT_EQ(0, std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)));
  int64_t same = 0;
  for (size_t i = 0; i < a.x.size(); ++i) same += a.x[i] == c.x[i];
  EXPECT_EQ(same, 0);
}

TEST(Blobs, GoldenBits) {
  const Classification d = make_blobs(recommended_blobs());
  EXPECT_EQ(fnv1a(d.x), 4955918854254732199ULL) << "x hash";
}

// ---------------------------------------------------------------------------
// split() and take()
// ---------------------------------------------------------------------------

TEST(Split, RoundsTheTestShareAndKeepsTheOrder) {
  const Classification d = make_spirals(100, 3, 0.1f, 2);
  struct Case {
    double fraction;
    int64_t test_rows;
  };
  // 0.29 * 100 is 28.999999999999996 in binary: rounding, not truncation.
  for (const Case c : {Case{0.0, 0}, Case{0.2, 20}, Case{0.29, 29}, Case{0.5, 50}, Case{0.999, 100}}) {
    const auto [train, test] = split(d, c.fraction);
    EXPECT_EQ(test.count, c.test_rows) << "fraction " << c.fraction;
    EXPECT_EQ(train.count + test.count, 100);
    EXPECT_EQ(train.features, 2);
    EXPECT_EQ(test.classes, 3);
    for (int64_t i = 0; i < train.count; ++i) {
      EXPECT_EQ(train.y[i], d.y[i]);
      EXPECT_EQ(train.x[2 * i + 1], d.x[2 * i + 1]);
    }
    for (int64_t i = 0; i < test.count; ++i) {
      EXPECT_EQ(test.y[i], d.y[train.count + i]);
      EXPECT_EQ(test.x[2 * i], d.x[2 * (train.count + i)]);
    }
  }
  const auto [train, test] = split(Classification{}, 0.5);
  EXPECT_EQ(train.count + test.count, 0);
}

TEST(Take, GathersRowsWithRepeats) {
  const Classification d = make_blobs(6, 3, 2, 1.0f, 7);
  const std::vector<int64_t> rows = {5, 0, 5, 2};
  const Classification t = take(d, rows);
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.features, 3);
  EXPECT_EQ(t.classes, 2);
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_EQ(t.y[k], d.y[rows[k]]);
    for (int64_t f = 0; f < 3; ++f) EXPECT_EQ(t.x[k * 3 + f], d.x[rows[k] * 3 + f]);
  }
  EXPECT_EQ(take(d, std::vector<int64_t>{}).count, 0);
}

// A hand-made table (not a generator's output), so every expected value is written here.
TEST(CopyRows, CopiesConsecutiveRowsAndWraps) {
  Classification d;
  d.count = 3;
  d.features = 2;
  d.classes = 3;
  d.x = {0.f, 1.f, 10.f, 11.f, 20.f, 21.f};
  d.y = {0, 1, 2};
  std::vector<float> x(8);
  std::vector<int32_t> y(4);
  copy_rows(d, 2, x, y);  // rows 2, 0, 1, 2
  EXPECT_EQ(x, (std::vector<float>{20.f, 21.f, 0.f, 1.f, 10.f, 11.f, 20.f, 21.f}));
  EXPECT_EQ(y, (std::vector<int32_t>{2, 0, 1, 2}));
  copy_rows(d, 0, std::span<float>(), std::span<int32_t>());  // no rows: nothing to do
  std::vector<float> short_x(7);
  EXPECT_THROW(copy_rows(d, 0, short_x, y), dtl::InvalidArgument);
  EXPECT_THROW(copy_rows(d, -1, x, y), dtl::InvalidArgument);
  EXPECT_THROW(copy_rows(Classification{}, 0, x, y), dtl::InvalidArgument);
}

}  // namespace
}  // namespace dtl::data
