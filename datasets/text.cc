// Character-level text: a synthetic corpus, the character vocabulary, and
// reading a text file.
//
// What this file teaches: the smallest tokenizer there is. A character-level
// model's vocabulary is just the distinct bytes of its training text, sorted;
// a token is an index into that string. The synthetic corpus gives a tiny GPT
// something with structure at two scales — spelling inside words, grammar
// between them — without downloading anything, and the same text everywhere
// (it draws only integers: Rng::below()).
#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <string>

#include "datasets/datasets.h"

namespace dtl::data {
namespace {

// ---------------------------------------------------------------------------
// The grammar
//
//   sentence := clause [" and " clause] ["," pp] "."
//   clause   := np " " (tverb " " np | iverb [" " adverb])
//   np       := det [" " adj] " " noun
//   pp       := " " prep " " np
//
// The first letter of each sentence is upper-case; sentences are separated by
// a space, and a paragraph (a newline) ends after 3 to 6 sentences.
// ---------------------------------------------------------------------------

constexpr std::array<std::string_view, 6> kDeterminers = {"the", "a", "every", "some", "one",
                                                           "that"};
constexpr std::array<std::string_view, 12> kAdjectives = {
    "small", "old", "red", "quiet", "happy", "green", "cold", "bright", "little", "brave",
    "tired", "wise"};
constexpr std::array<std::string_view, 15> kNouns = {
    "cat",   "dog",  "king",  "queen", "bird",  "ship", "river",
    "house", "child", "horse", "tree", "star", "fox",  "garden", "owl"};
constexpr std::array<std::string_view, 10> kTransitiveVerbs = {
    "saw", "found", "liked", "followed", "watched", "painted", "heard", "helped", "carried",
    "loved"};
constexpr std::array<std::string_view, 7> kIntransitiveVerbs = {
    "slept", "ran", "sang", "waited", "laughed", "walked", "smiled"};
constexpr std::array<std::string_view, 6> kAdverbs = {"slowly", "quietly", "again",
                                                      "today",  "often",   "gladly"};
constexpr std::array<std::string_view, 6> kPrepositions = {"near",   "under", "over",
                                                           "behind", "beside", "across"};

/// Writes a random grammar sentence at the end of `out`.
class SentenceWriter {
 public:
  SentenceWriter(Rng& rng, std::string& out) : rng_(rng), out_(out) {}

  void sentence() {
    const size_t start = out_.size();
    clause();
    if (chance(1, 4)) {
      out_ += " and ";
      clause();
    }
    if (chance(1, 4)) {
      out_ += ",";
      prepositional_phrase();
    }
    out_ += ".";
    out_[start] = static_cast<char>(out_[start] - 'a' + 'A');  // every word starts in a-z
  }

 private:
  template <size_t N>
  std::string_view pick(const std::array<std::string_view, N>& words) {
    return words[rng_.below(N)];
  }
  template <size_t N>
  void word(const std::array<std::string_view, N>& words) {
    out_ += pick(words);
  }
  bool chance(uint64_t numerator, uint64_t denominator) {
    return rng_.below(denominator) < numerator;
  }
  void noun_phrase() {
    const std::string_view det = pick(kDeterminers);
    const std::string_view adjective = chance(1, 2) ? pick(kAdjectives) : std::string_view();
    const std::string_view noun = pick(kNouns);
    const std::string_view next = adjective.empty() ? noun : adjective;
    out_ += det;
    if (det == "a" && std::string_view("aeiou").find(next[0]) != std::string_view::npos) {
      out_ += 'n';  // "an old king", "an owl": a rule of English a model can pick up
    }
    if (!adjective.empty()) {
      out_ += ' ';
      out_ += adjective;
    }
    out_ += ' ';
    out_ += noun;
  }
  void clause() {
    noun_phrase();
    out_ += ' ';
    if (chance(2, 3)) {
      word(kTransitiveVerbs);
      out_ += ' ';
      noun_phrase();
    } else {
      word(kIntransitiveVerbs);
      if (chance(1, 2)) {
        out_ += ' ';
        word(kAdverbs);
      }
    }
  }
  void prepositional_phrase() {
    out_ += ' ';
    word(kPrepositions);
    out_ += ' ';
    noun_phrase();
  }

  Rng& rng_;
  std::string& out_;
};

}  // namespace

std::string make_char_corpus(int64_t length, uint64_t seed) {
  DTL_REQUIRE_ARG(length >= 0, "make_char_corpus", "length",
                  "is " + std::to_string(length) + "; need >= 0");
  Rng rng(seed);
  std::string text;
  text.reserve(static_cast<size_t>(length) + 128);
  SentenceWriter writer(rng, text);
  while (static_cast<int64_t>(text.size()) < length) {
    const uint64_t sentences = 3 + rng.below(4);  // 3 to 6 per paragraph
    for (uint64_t s = 0; s < sentences; ++s) {
      if (s > 0) text += ' ';
      writer.sentence();
    }
    text += '\n';
  }
  text.resize(static_cast<size_t>(length));
  return text;
}

// ---------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------

CharCorpus encode_chars(std::string_view text) {
  // Which of the 256 byte values occur; sorting by unsigned byte value (not by
  // `char`, which is signed on x86 and unsigned on ARM) gives one order everywhere.
  std::array<bool, 256> present{};
  for (const char ch : text) present[static_cast<unsigned char>(ch)] = true;

  CharCorpus corpus;
  std::array<int32_t, 256> id{};
  for (int b = 0; b < 256; ++b) {
    if (!present[b]) continue;
    id[b] = static_cast<int32_t>(corpus.vocab.size());
    corpus.vocab += static_cast<char>(b);
  }
  corpus.tokens.reserve(text.size());
  for (const char ch : text) corpus.tokens.push_back(id[static_cast<unsigned char>(ch)]);
  return corpus;
}

std::vector<int32_t> encode_text(const CharCorpus& corpus, std::string_view text) {
  std::array<int32_t, 256> id;
  id.fill(-1);
  for (size_t i = 0; i < corpus.vocab.size(); ++i) {
    id[static_cast<unsigned char>(corpus.vocab[i])] = static_cast<int32_t>(i);
  }
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  for (size_t k = 0; k < text.size(); ++k) {
    const int32_t t = id[static_cast<unsigned char>(text[k])];
    DTL_REQUIRE_ARG(t >= 0, "encode_text", "text",
                    "has byte " + std::to_string(static_cast<unsigned char>(text[k])) +
                        " at position " + std::to_string(k) + ", which is not in the vocabulary");
    tokens.push_back(t);
  }
  return tokens;
}

std::string decode_chars(const CharCorpus& corpus, std::span<const int32_t> tokens) {
  const auto vocab_size = static_cast<int64_t>(corpus.vocab.size());
  std::string text;
  text.reserve(tokens.size());
  for (size_t k = 0; k < tokens.size(); ++k) {
    DTL_REQUIRE_ARG(tokens[k] >= 0 && tokens[k] < vocab_size, "decode_chars", "tokens",
                    "has " + std::to_string(tokens[k]) + " at position " + std::to_string(k) +
                        "; need an id in [0, " + std::to_string(vocab_size) + ")");
    text += corpus.vocab[static_cast<size_t>(tokens[k])];
  }
  return text;
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

std::string load_text(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    throw LoadError("load_text: " + path.string() +
                    ": no such file (the fetch scripts in datasets/ download real data)");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw LoadError("load_text: " + path.string() + ": not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError("load_text: " + path.string() + ": cannot open for reading");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw LoadError("load_text: " + path.string() + ": read error");
  return text;
}

void copy_windows(const CharCorpus& corpus, int64_t first, int64_t context, std::span<int32_t> x,
                  std::span<int32_t> y) {
  DTL_REQUIRE_ARG(context >= 1, "copy_windows", "context", "is " + std::to_string(context) + "; need at least 1");
  DTL_REQUIRE_ARG(first >= 0, "copy_windows", "first", "is " + std::to_string(first) + ", below 0");
  DTL_REQUIRE_ARG(x.size() % static_cast<std::size_t>(context) == 0, "copy_windows", "x",
                  "holds " + std::to_string(x.size()) + " tokens, not whole windows of " + std::to_string(context));
  DTL_REQUIRE_ARG(y.size() == x.size(), "copy_windows", "y",
                  "holds " + std::to_string(y.size()) + " tokens; x holds " + std::to_string(x.size()));
  const int64_t starts = static_cast<int64_t>(corpus.tokens.size()) - context - 1;
  DTL_REQUIRE_ARG(starts > 0, "copy_windows", "corpus",
                  "has " + std::to_string(corpus.tokens.size()) + " tokens; windows of " + std::to_string(context) +
                      " need at least " + std::to_string(context + 2));
  const int64_t rows = static_cast<int64_t>(x.size()) / context;
  for (int64_t w = 0; w < rows; ++w) {
    const int64_t start = ((first + w) * (context + 1)) % starts;
    std::copy_n(corpus.tokens.begin() + start, context, x.begin() + w * context);
    std::copy_n(corpus.tokens.begin() + start + 1, context, y.begin() + w * context);
  }
}

}  // namespace dtl::data
