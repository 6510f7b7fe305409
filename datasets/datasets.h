/// @file
/// @brief dtl::data — the data sets of the training labs (04–07) and of
/// `./dtl train`: deterministic generators, loaders, and the distributed sampler.
///
/// What is here, and where it is written:
///   - synthetic.cc  make_spirals(), make_blobs(), split(), take():
///                   labelled point clouds whose attainable accuracy is known;
///   - text.cc       make_char_corpus(), encode_chars(), decode_chars(), load_text():
///                   character-level text for a tiny GPT;
///   - mnist.cc      load_mnist(): the IDX files of MNIST (fetch_mnist.sh);
///   - sampler.cc    DistributedSampler: which rows each rank trains on, per epoch;
///   - harness/random.h  Rng: the portable generator behind all of it (shared with harness/nn).
///
/// Every generator is a pure function of its arguments: the same seed gives the
/// same bits on every machine (see random.h for why that needs care), and every
/// rank can build the whole data set itself, with no communication.
///
/// Shapes: a Classification's `x` is (count, features) in row-major order, `y`
/// is (count,). Errors: a bad argument throws dtl::InvalidArgument naming it; a
/// file that cannot be read or is malformed throws dtl::data::LoadError naming
/// the file and what is wrong with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/random.h"
#include "harness/error.h"

namespace dtl::data {

using dtl::Rng;         // harness/random.h: the portable generator, named here for data code
using dtl::splitmix64;

/// @brief A file could not be read, or its contents are not what the loader expects.
///
/// what() names the file and the problem, e.g. "load_mnist: data/x.idx: magic
/// number 0x00000801, expected 0x00000803 (IDX3 images)".
class LoadError : public dtl::Error {
 public:
  using Error::Error;
};

// ---------------------------------------------------------------------------
// Labelled feature vectors
// ---------------------------------------------------------------------------

/// @brief A labelled set of feature vectors: `count` rows of `features` floats.
///
/// Invariants (checked by split() and take()): `x.size() == count * features`,
/// `y.size() == count`, every label in [0, classes).
struct Classification {
  int64_t count = 0;        ///< rows
  int64_t features = 0;     ///< columns of `x`
  int64_t classes = 0;      ///< labels are 0 .. classes-1
  std::vector<float> x;     ///< (count, features), row-major: row i is x[i*features .. (i+1)*features)
  std::vector<int32_t> y;   ///< (count,), each in [0, classes)
};

/// @brief Interleaved spirals in the plane (features == 2), one arm per class.
///
/// Row i belongs to class `c = i % classes`, so every prefix of the rows is
/// balanced. Its point lies on arm c at a radius drawn uniformly from
/// [kSpiralInnerRadius, 1):
///
///     theta = 2 pi c / classes + 2 pi kSpiralTurns * r
///     x     = r cos(theta) + noise * N(0,1),   r sin(theta) + noise * N(0,1)
///
/// The radius is random rather than increasing with i, so the last rows (the
/// test set of split()) cover the arms as evenly as the first.
/// Random draws per row, in order: the radius (one uniform), then the two noise
/// terms (two normals).
/// @param[in] count rows, ≥ 0.
/// @param[in] classes arms, ≥ 2.
/// @param[in] noise standard deviation of the Gaussian noise added to each
///                  coordinate, ≥ 0 (the outer radius of the arms is 1).
/// @param[in] seed the only source of randomness.
/// @return (count, 2) points with labels in [0, classes).
/// @throws dtl::InvalidArgument naming `count`, `classes` or `noise`.
Classification make_spirals(int64_t count, int64_t classes, float noise, uint64_t seed);

/// @brief Isotropic Gaussian blobs, one per class.
///
/// The class means are blob_centers(features, classes, seed); row i belongs to
/// class `i % classes` and is its mean plus `spread * N(0, I)`.
/// @param[in] count rows, ≥ 0.
/// @param[in] features dimension of each row, ≥ 1.
/// @param[in] classes blobs, ≥ 2.
/// @param[in] spread standard deviation of every coordinate around its mean, ≥ 0.
/// @param[in] seed the only source of randomness.
/// @return (count, features) points with labels in [0, classes).
/// @throws dtl::InvalidArgument naming `count`, `features`, `classes` or `spread`.
Classification make_blobs(int64_t count, int64_t features, int64_t classes, float spread,
                          uint64_t seed);

/// @brief The class means make_blobs() uses: each coordinate uniform in
/// [-kBlobCenterRange, kBlobCenterRange), drawn first from Rng(seed).
///
/// Exposed so that a reader (or a test) can compare a classifier with the best
/// one possible: for equal priors and isotropic noise, assigning each point to
/// the nearest true mean is the Bayes classifier.
/// @param[in] features dimension, ≥ 1.
/// @param[in] classes number of means, ≥ 2.
/// @param[in] seed the same seed as make_blobs().
/// @return (classes, features), row-major, as doubles (before rounding to float).
/// @throws dtl::InvalidArgument naming `features` or `classes`.
std::vector<double> blob_centers(int64_t features, int64_t classes, uint64_t seed);

/// @brief Splits rows into a training set (the first rows) and a test set (the rest).
///
/// The test set gets `round(test_fraction * count)` rows, the training set the
/// others, in their original order. The generators interleave classes and
/// draw every row independently, so no shuffle is needed; shuffle real data
/// with take() first if it is sorted.
/// @param[in] data a consistent Classification.
/// @param[in] test_fraction in [0, 1).
/// @return {train, test}, with the same `features` and `classes` as `data`.
/// @throws dtl::InvalidArgument naming `test_fraction`, or `data` if it is inconsistent.
std::pair<Classification, Classification> split(const Classification& data,
                                                double test_fraction);

/// @brief Gathers rows by index, e.g. a sampler's batch.
/// @param[in] data a consistent Classification.
/// @param[in] indices rows to copy, each in [0, data.count); repeats allowed.
/// @return (indices.size(), features): row k is row indices[k] of `data`.
/// @throws dtl::InvalidArgument naming `indices` (with the bad position and value),
///         or `data` if it is inconsistent.
Classification take(const Classification& data, std::span<const int64_t> indices);

/// @brief Copies consecutive rows into caller-owned buffers: the training batches
/// of labs 04-07's tests, where step s's global batch of B rows is rows [s B, (s+1) B)
/// and a rank takes its part of it.
/// @param[in] data a consistent Classification.
/// @param[in] first the first row; rows wrap around at data.count.
/// @param[out] x (rows, features) values; rows = y.size().
/// @param[out] y (rows,) labels.
/// @throws dtl::InvalidArgument naming `x` (wrong size), `first` (negative) or `data` (empty).
void copy_rows(const Classification& data, int64_t first, std::span<float> x, std::span<int32_t> y);

// ---------------------------------------------------------------------------
// Recommended settings: what ./dtl train and labs 04–07 use
// ---------------------------------------------------------------------------

/// @brief Arguments of make_spirals() plus the test fraction, as one value.
struct SpiralSettings {
  int64_t count = 0;           ///< rows in total (train + test)
  int64_t classes = 0;         ///< arms
  float noise = 0.0f;          ///< Gaussian noise per coordinate
  uint64_t seed = 0;           ///< data seed
  double test_fraction = 0.0;  ///< share of rows held out by split()
};

/// @brief Arguments of make_blobs() plus the test fraction, as one value.
struct BlobSettings {
  int64_t count = 0;           ///< rows in total (train + test)
  int64_t features = 0;        ///< dimension
  int64_t classes = 0;         ///< blobs
  float spread = 0.0f;         ///< standard deviation around each mean
  uint64_t seed = 0;           ///< data seed
  double test_fraction = 0.0;  ///< share of rows held out by split()
};

/// @brief How many turns each spiral arm makes from its inner to its outer end.
inline constexpr double kSpiralTurns = 0.75;
/// @brief The smallest radius on an arm (the arms meet at the centre; starting
/// a little outside it keeps the classes separable).
inline constexpr double kSpiralInnerRadius = 0.1;
/// @brief Blob means are uniform in [-kBlobCenterRange, kBlobCenterRange) per coordinate.
inline constexpr double kBlobCenterRange = 4.0;

/// @brief The spirals for `./dtl train mlp`: 3 arms, 3000 points, noise 0.05,
/// seed 1, 20% held out.
///
/// A 5-nearest-neighbour classifier (no training at all) scores ≥ 97% on the
/// held-out rows (the test suite checks it), so a small MLP can reach ≥ 95%.
/// @return the settings; pass them to make_spirals(const SpiralSettings&).
SpiralSettings recommended_spirals();

/// @brief The blobs for quick sanity runs: 2000 points, 8 features, 4 classes,
/// spread 1.75, seed 1, 20% held out.
///
/// The nearest-true-mean classifier (the Bayes classifier here) scores ≥ 97%
/// on the held-out rows (checked by the test suite).
/// @return the settings; pass them to make_blobs(const BlobSettings&).
BlobSettings recommended_blobs();

/// @brief make_spirals() with its arguments taken from `settings`.
/// @param[in] settings count, classes, noise and seed (test_fraction is not used).
/// @return the full data set; split it with split(data, settings.test_fraction).
/// @throws dtl::InvalidArgument as make_spirals().
Classification make_spirals(const SpiralSettings& settings);

/// @brief make_blobs() with its arguments taken from `settings`.
/// @param[in] settings count, features, classes, spread and seed (test_fraction is not used).
/// @return the full data set; split it with split(data, settings.test_fraction).
/// @throws dtl::InvalidArgument as make_blobs().
Classification make_blobs(const BlobSettings& settings);

// ---------------------------------------------------------------------------
// Character-level text
// ---------------------------------------------------------------------------

/// @brief Text as a sequence of character ids.
struct CharCorpus {
  std::string vocab;            ///< distinct characters sorted by byte value (as unsigned char); token i is vocab[i]
  std::vector<int32_t> tokens;  ///< the text, one id per character, each in [0, vocab.size())
};

/// @brief Synthetic English-like text that a tiny GPT can learn in minutes.
///
/// Sentences come from a small grammar: a noun phrase ("the old king"), a verb
/// with an object or an adverb, now and then a prepositional phrase or a
/// second clause joined by "and", a capital letter at the start and a full stop
/// at the end; paragraphs are separated by a newline. Some 60 words, 30-odd distinct
/// characters. There is real structure to learn (spelling, then word order)
/// and no rare characters. Uses only Rng::below(), so it is bit-identical everywhere.
/// @param[in] length characters to return, ≥ 0 (the text is cut at exactly this length).
/// @param[in] seed the only source of randomness.
/// @return the text.
/// @throws dtl::InvalidArgument naming `length`.
std::string make_char_corpus(int64_t length, uint64_t seed);

/// @brief Builds the vocabulary of `text` and encodes it.
/// @param[in] text any bytes (UTF-8 is treated byte by byte).
/// @return the sorted distinct bytes of `text` and the text as ids.
CharCorpus encode_chars(std::string_view text);

/// @brief Encodes `text` with an existing vocabulary (e.g. a prompt for a trained model).
/// @param[in] corpus supplies the vocabulary.
/// @param[in] text characters that all occur in `corpus.vocab`.
/// @return one id per character of `text`.
/// @throws dtl::InvalidArgument naming `text` if a character is not in the vocabulary.
std::vector<int32_t> encode_text(const CharCorpus& corpus, std::string_view text);

/// @brief Turns ids back into characters.
/// @param[in] corpus supplies the vocabulary.
/// @param[in] tokens ids, each in [0, corpus.vocab.size()).
/// @return the characters `corpus.vocab[tokens[k]]`.
/// @throws dtl::InvalidArgument naming `tokens` (position and value) on an id out of range.
std::string decode_chars(const CharCorpus& corpus, std::span<const int32_t> tokens);

/// @brief Copies next-token training windows into caller-owned buffers: window w
/// (w = 0 .. rows-1, rows = x.size() / context) starts at token
/// ((first + w) (context + 1)) mod (tokens - context - 1); x gets its `context`
/// tokens and y the `context` tokens one further on (the targets).
/// @param[in] corpus the text.
/// @param[in] first the first window's number.
/// @param[in] context tokens per window, ≥ 1.
/// @param[out] x (rows, context) inputs.
/// @param[out] y (rows, context) targets.
/// @throws dtl::InvalidArgument naming `context`, `x` or `y` (sizes), `first`, or `corpus` (too short).
void copy_windows(const CharCorpus& corpus, int64_t first, int64_t context, std::span<int32_t> x,
                  std::span<int32_t> y);

/// @brief Reads a whole file as bytes.
/// @param[in] path the file.
/// @return its contents.
/// @throws LoadError naming the path if it does not exist, is not a regular
///         file, or cannot be read.
std::string load_text(const std::filesystem::path& path);

// ---------------------------------------------------------------------------
// MNIST (IDX files)
// ---------------------------------------------------------------------------

/// @brief Loads MNIST-style IDX files: images as features scaled to [0, 1], and labels.
///
/// IDX is big-endian: a 4-byte magic number (0x00000803 for 3-D unsigned-byte
/// images, 0x00000801 for 1-D unsigned-byte labels), one 4-byte size per
/// dimension, then the bytes. Everything is checked: magic numbers, positive
/// dimensions, that each file is exactly as long as its header says, that both
/// files hold the same number of items, and that labels are below 10. A file
/// that is still gzip-compressed is recognized and named as such.
/// @param[in] images_idx e.g. data/mnist/train-images-idx3-ubyte (rows × cols pixels per image).
/// @param[in] labels_idx e.g. data/mnist/train-labels-idx1-ubyte.
/// @return count images, features = rows * cols (784 for MNIST), classes = 10,
///         pixel p stored as p / 255.
/// @throws LoadError naming the file and what is wrong with it.
Classification load_mnist(const std::filesystem::path& images_idx,
                          const std::filesystem::path& labels_idx);

// ---------------------------------------------------------------------------
// DistributedSampler
// ---------------------------------------------------------------------------

/// @brief Which rows each rank trains on in an epoch — torch's DistributedSampler.
///
/// Every rank builds the same permutation of [0, dataset_size) from the shared
/// seed and the epoch (an Rng seeded with `seed + epoch`, then Fisher–Yates),
/// so the ranks agree without communicating. The permutation is then made a
/// multiple of world_size long:
///   - without drop_last it is padded by wrapping around to its start, so
///     `num_samples() = ceil(N / W)`; the padded samples repeat rows that
///     another rank (or the same one) also sees in this epoch;
///   - with drop_last its tail is dropped, so `num_samples() = floor(N / W)`
///     and up to W-1 rows are skipped this epoch (different ones each epoch
///     when shuffling).
///
/// Rank r takes positions r, r + W, r + 2W, … of that list (a strided slice, as
/// torch does). The slices are disjoint, and without drop_last their union is
/// every row. Example, N = 10, W = 3, no shuffle: the padded list is
/// 0 1 2 3 4 5 6 7 8 9 0 1, so rank 0 gets {0,3,6,9}, rank 1 {1,4,7,0}, rank 2
/// {2,5,8,1}; with drop_last the list is 0..8 and rank 0 gets {0,3,6}.
///
/// Call set_epoch() at the start of every epoch, with the same value on every
/// rank; without it, every epoch sees the same order.
class DistributedSampler {
 public:
  /// @param[in] dataset_size N, rows in the data set, ≥ 0.
  /// @param[in] rank this rank, in [0, world_size).
  /// @param[in] world_size W, ranks sharing the data, ≥ 1.
  /// @param[in] seed the shuffle seed; must be the same on every rank.
  /// @param[in] shuffle permute the rows each epoch (else the order is 0, 1, 2, …).
  /// @param[in] drop_last drop the tail instead of padding (see the class comment).
  /// @throws dtl::InvalidArgument naming `dataset_size`, `rank` or `world_size`.
  DistributedSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed,
                     bool shuffle = true, bool drop_last = false);

  /// @brief Chooses the epoch, and so the permutation (seeded with seed + epoch).
  /// @param[in] epoch ≥ 0; the same on every rank.
  /// @throws dtl::InvalidArgument naming `epoch` if it is negative.
  void set_epoch(int64_t epoch);

  /// @brief This rank's rows for the current epoch, in the order to visit them.
  /// @return num_samples() indices, each in [0, dataset_size).
  std::vector<int64_t> indices() const;

  /// @brief Rows per rank per epoch; the same on every rank.
  /// @return ceil(N / W), or floor(N / W) with drop_last.
  int64_t num_samples() const { return num_samples_; }

  /// @brief Rows all ranks together visit per epoch, padding included.
  /// @return num_samples() * world_size.
  int64_t total_size() const { return num_samples_ * world_size_; }

  /// @brief The epoch last set (0 before any set_epoch()).
  /// @return the current epoch.
  int64_t epoch() const { return epoch_; }

 private:
  int64_t dataset_size_;
  int rank_;
  int world_size_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace dtl::data
