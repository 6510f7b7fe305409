// MNIST's IDX files: images and labels into a Classification.
//
// What this file teaches: reading a binary format defensively. IDX (LeCun et
// al.) is a 4-byte magic number — two zero bytes, a type code (0x08: unsigned
// byte) and the number of dimensions — then one big-endian 32-bit size per
// dimension, then the data. A loader that trusts the header reads garbage past
// the end of a truncated download, or pairs 60000 images with 10000 labels;
// this one checks everything and says which file is wrong, and how.
//
// Layout of the two files MNIST ships as (after gunzip):
//   images: 0x00000803, N, rows, cols, then N*rows*cols pixel bytes (0..255)
//   labels: 0x00000801, N,             then N label bytes (0..9)
#include <algorithm>
#include <cstdio>
#include <string>

#include "datasets/datasets.h"

namespace dtl::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr int kMnistClasses = 10;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw LoadError("load_mnist: " + file.string() + ": " + what);
}

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

/// An IDX file read whole, with its header decoded.
struct Idx {
  std::vector<uint32_t> dims;  ///< one size per dimension, from the header
  std::string bytes;           ///< the whole file
  size_t data_offset = 0;      ///< where the data start: 4 + 4 * dims.size()
};

/// Reads `file` and checks its magic number, its dimensions and its length.
Idx read_idx(const std::filesystem::path& file, uint32_t magic, const char* what) {
  Idx idx;
  try {
    idx.bytes = load_text(file);
  } catch (const LoadError& e) {
    // load_text's message names the path and the problem; add which input it was.
    throw LoadError(std::string("load_mnist: reading the ") + what + " file: " + e.what());
  }
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(idx.bytes[i]); };
  const auto be32 = [&](size_t at) {
    return uint32_t{byte(at)} << 24 | uint32_t{byte(at + 1)} << 16 | uint32_t{byte(at + 2)} << 8 |
           uint32_t{byte(at + 3)};
  };

  if (idx.bytes.size() >= 2 && byte(0) == 0x1f && byte(1) == 0x8b) {
    fail(file, "is gzip-compressed; run gunzip on it first (fetch_mnist.sh does)");
  }
  if (idx.bytes.size() < 4) {
    fail(file, "is " + std::to_string(idx.bytes.size()) +
                   " bytes, too short for an IDX magic number (empty or truncated download?)");
  }
  const uint32_t found = be32(0);
  if (found != magic) {
    fail(file, "magic number " + hex(found) + ", expected " + hex(magic) + " (" + what +
                   "; did you swap the images and labels files?)");
  }
  const size_t rank = magic & 0xff;  // the last magic byte counts the dimensions
  idx.data_offset = 4 + 4 * rank;
  if (idx.bytes.size() < idx.data_offset) {
    fail(file, "is " + std::to_string(idx.bytes.size()) + " bytes, shorter than the " +
                   std::to_string(idx.data_offset) + "-byte header of " + what + " (truncated?)");
  }
  // Items the header promises, capped once it exceeds the file (so that four
  // large 32-bit sizes cannot overflow 64 bits).
  uint64_t items = 1;
  for (size_t d = 0; d < rank; ++d) {
    idx.dims.push_back(be32(4 + 4 * d));
    if (idx.dims.back() == 0 && d > 0) fail(file, "dimension " + std::to_string(d) + " is 0");
    items = std::min<uint64_t>(items * idx.dims.back(), idx.bytes.size() + 1);
  }
  const uint64_t expected = idx.data_offset + items;
  if (idx.bytes.size() < expected) {
    fail(file, "is " + std::to_string(idx.bytes.size()) + " bytes, shorter than its header (" +
                   what + ") promises: truncated download?");
  }
  if (idx.bytes.size() > expected) {
    fail(file, "is " + std::to_string(idx.bytes.size()) + " bytes, " +
                   std::to_string(idx.bytes.size() - expected) +
                   " more than its header (" + what + ") promises");
  }
  return idx;
}

}  // namespace

Classification load_mnist(const std::filesystem::path& images_idx,
                          const std::filesystem::path& labels_idx) {
  const Idx images = read_idx(images_idx, kImagesMagic, "IDX3 unsigned-byte images");
  const Idx labels = read_idx(labels_idx, kLabelsMagic, "IDX1 unsigned-byte labels");
  if (images.dims[0] != labels.dims[0]) {
    fail(labels_idx, "holds " + std::to_string(labels.dims[0]) + " labels but " +
                         images_idx.string() + " holds " + std::to_string(images.dims[0]) +
                         " images");
  }

  Classification out;
  out.count = images.dims[0];
  out.features = int64_t{images.dims[1]} * images.dims[2];
  out.classes = kMnistClasses;
  out.x.resize(static_cast<size_t>(out.count * out.features));
  out.y.resize(static_cast<size_t>(out.count));
  for (size_t i = 0; i < out.x.size(); ++i) {
    const auto pixel = static_cast<unsigned char>(images.bytes[images.data_offset + i]);
    out.x[i] = static_cast<float>(pixel) / 255.0f;
  }
  for (size_t i = 0; i < out.y.size(); ++i) {
    const auto label = static_cast<unsigned char>(labels.bytes[labels.data_offset + i]);
    if (label >= kMnistClasses) {
      fail(labels_idx, "label " + std::to_string(label) + " at item " + std::to_string(i) +
                           " is not a digit 0..9");
    }
    out.y[i] = label;
  }
  return out;
}

}  // namespace dtl::data
