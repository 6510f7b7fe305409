// load_mnist() on small IDX files built byte by byte here: known pixels and
// labels, then every way a download can go wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/tests/temp_dir.h"

namespace dtl::data {
namespace {

/// Appends `value` as 4 big-endian bytes.
void put_be32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((value >> shift) & 0xff);
}

/// An IDX3 unsigned-byte file: magic 0x00000803, n, rows, cols, then the pixels.
std::string idx3(uint32_t n, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels) {
  std::string out;
  put_be32(out, 0x00000803);
  put_be32(out, n);
  put_be32(out, rows);
  put_be32(out, cols);
  out.append(pixels.begin(), pixels.end());
  return out;
}

/// An IDX1 unsigned-byte file: magic 0x00000801, n, then the labels.
std::string idx1(uint32_t n, const std::vector<uint8_t>& labels) {
  std::string out;
  put_be32(out, 0x00000801);
  put_be32(out, n);
  out.append(labels.begin(), labels.end());
  return out;
}

// Three 2x3 images and their labels.
const std::vector<uint8_t> kPixels = {0,   255, 51,  102, 1,   254,   // image 0
                                      10,  20,  30,  40,  50,  60,    // image 1
                                      255, 255, 255, 0,   0,   0};    // image 2
const std::vector<uint8_t> kLabels = {7, 0, 9};

/// Runs load_mnist and expects a LoadError whose message holds every one of `parts`.
void expect_load_error(const std::filesystem::path& images, const std::filesystem::path& labels,
                       const std::vector<std::string>& parts) {
  try {
    load_mnist(images, labels);
    ADD_FAILURE() << "no exception";
  } catch (const LoadError& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.what();
    }
  }
}

TEST(Mnist, LoadsKnownPixelsAndLabels) {
  testing::TempDir dir;
  const auto images = dir.write("images", idx3(3, 2, 3, kPixels));
  const auto labels = dir.write("labels", idx1(3, kLabels));
  const Classification d = load_mnist(images, labels);
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.features, 6);
  EXPECT_EQ(d.classes, 10);
  ASSERT_EQ(d.x.size(), 18u);
  EXPECT_EQ(d.y, (std::vector<int32_t>{7, 0, 9}));
  EXPECT_EQ(d.x[0], 0.0f);
  EXPECT_EQ(d.x[1], 1.0f);
  EXPECT_FLOAT_EQ(d.x[2], 0.2f);  // 51 / 255
  EXPECT_FLOAT_EQ(d.x[3], 0.4f);  // 102 / 255
  for (size_t i = 0; i < kPixels.size(); ++i) {
    EXPECT_NEAR(d.x[i], kPixels[i] / 255.0, 1e-7) << "pixel " << i;
  }
}

TEST(Mnist, EmptySetIsFine) {
  testing::TempDir dir;
  const Classification d =
      load_mnist(dir.write("images", idx3(0, 28, 28, {})), dir.write("labels", idx1(0, {})));
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.features, 784);
  EXPECT_TRUE(d.x.empty());
}

TEST(Mnist, SwappedFilesReportTheMagicNumber) {
  testing::TempDir dir;
  const auto images = dir.write("images", idx3(3, 2, 3, kPixels));
  const auto labels = dir.write("labels", idx1(3, kLabels));
  expect_load_error(labels, images, {labels.string(), "magic number 0x00000801", "0x00000803"});
}

TEST(Mnist, TruncatedOrOverlongFilesAreNamed) {
  testing::TempDir dir;
  std::string short_images = idx3(3, 2, 3, kPixels);
  short_images.pop_back();
  const auto labels = dir.write("labels", idx1(3, kLabels));
  const auto truncated = dir.write("truncated", short_images);
  expect_load_error(truncated, labels, {truncated.string(), "truncated"});

  const auto header_only = dir.write("header_only", idx3(3, 2, 3, kPixels).substr(0, 10));
  expect_load_error(header_only, labels, {header_only.string(), "header"});

  const auto empty = dir.write("empty", "");
  expect_load_error(empty, labels, {empty.string(), "too short"});

  const auto images = dir.write("images", idx3(3, 2, 3, kPixels));
  const auto long_labels = dir.write("long_labels", idx1(3, kLabels) + "x");
  expect_load_error(images, long_labels, {long_labels.string(), "1 more"});
}

TEST(Mnist, MismatchedCountsNameBothFiles) {
  testing::TempDir dir;
  const auto images = dir.write("images", idx3(3, 2, 3, kPixels));
  const auto labels = dir.write("labels", idx1(2, {7, 0}));
  expect_load_error(images, labels, {labels.string(), images.string(), "2 labels", "3 images"});
}

TEST(Mnist, LabelsAboveNineAreRejected) {
  testing::TempDir dir;
  const auto images = dir.write("images", idx3(3, 2, 3, kPixels));
  const auto labels = dir.write("labels", idx1(3, {7, 10, 9}));
  expect_load_error(images, labels, {labels.string(), "label 10", "item 1"});
}

TEST(Mnist, GzipAndMissingFilesGetAHint) {
  testing::TempDir dir;
  const auto labels = dir.write("labels", idx1(3, kLabels));
  const auto gz = dir.write("images.gz", std::string("\x1f\x8b\x08\x00", 4) + "rest");
  expect_load_error(gz, labels, {gz.string(), "gzip"});
  const auto missing = dir.path() / "train-images-idx3-ubyte";
  expect_load_error(missing, labels, {missing.string(), "no such file"});
}

TEST(Mnist, ZeroSizedImagesAreRejected) {
  testing::TempDir dir;
  const auto images = dir.write("images", idx3(3, 0, 3, {}));
  const auto labels = dir.write("labels", idx1(3, kLabels));
  expect_load_error(images, labels, {images.string(), "dimension 1 is 0"});
}

}  // namespace
}  // namespace dtl::data
