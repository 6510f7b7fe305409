// The character corpus, the tokenizer and load_text(). Oracles: hand-worked
// encodings, the grammar's word list written out again here, and files the
// tests write themselves.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/tests/temp_dir.h"

namespace dtl::data {
namespace {

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 14695981039346656037ULL;
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ULL;
  }
  return h;
}

// ---------------------------------------------------------------------------
// make_char_corpus
// ---------------------------------------------------------------------------

TEST(CharCorpus, HasExactlyTheRequestedLength) {
  for (const int64_t length : {0, 1, 2, 100, 12345}) {
    EXPECT_EQ(make_char_corpus(length, 3).size(), static_cast<size_t>(length));
  }
  EXPECT_THROW(make_char_corpus(-1, 3), dtl::InvalidArgument);
  try {
    make_char_corpus(-1, 3);
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'length'"), std::string::npos) << e.what();
  }
}

TEST(CharCorpus, LongerTextStartsWithTheShorterOne) {
  // Cut at exactly `length`: the same seed gives prefixes of one stream.
  const std::string long_text = make_char_corpus(5000, 9);
  EXPECT_EQ(make_char_corpus(1234, 9), long_text.substr(0, 1234));
}

TEST(CharCorpus, IsGrammaticalEnglishLikeText) {
  // The grammar's words, written out independently of text.cc.
  const std::set<std::string> words = {
      "the", "a", "an", "every", "some", "one", "that",                             // determiners
      "small", "old", "red", "quiet", "happy", "green", "cold", "bright", "little",  // adjectives
      "brave", "tired", "wise",
      "cat", "dog", "king", "queen", "bird", "ship", "river", "house", "child",      // nouns
      "horse", "tree", "star", "fox", "garden", "owl",
      "saw", "found", "liked", "followed", "watched", "painted", "heard", "helped",  // verbs
      "carried", "loved", "slept", "ran", "sang", "waited", "laughed", "walked", "smiled",
      "slowly", "quietly", "again", "today", "often", "gladly",                      // adverbs
      "near", "under", "over", "behind", "beside", "across", "and"};                // prepositions
  const std::string text = make_char_corpus(20000, 1);
  const std::string cut = text.substr(0, text.rfind('\n') + 1);  // whole paragraphs only

  std::set<char> chars(cut.begin(), cut.end());
  for (const char ch : chars) {
    EXPECT_TRUE(std::islower(static_cast<unsigned char>(ch)) || std::isupper(static_cast<unsigned char>(ch)) ||
                ch == ' ' || ch == '.' || ch == ',' || ch == '\n')
        << "unexpected character " << static_cast<int>(ch);
  }
  EXPECT_LE(chars.size(), 40u);

  // Every sentence starts with a capital and ends with a full stop; every word
  // is from the list; "a" is never followed by a vowel.
  std::istringstream paragraphs(cut);
  std::string paragraph;
  int sentences = 0;
  while (std::getline(paragraphs, paragraph)) {
    ASSERT_FALSE(paragraph.empty());
    EXPECT_EQ(paragraph.back(), '.');
    std::istringstream tokens(paragraph);
    std::string token;
    bool sentence_start = true;
    std::string previous;
    while (tokens >> token) {
      if (sentence_start) {
        EXPECT_TRUE(std::isupper(static_cast<unsigned char>(token[0]))) << token;
        ++sentences;
      }
      sentence_start = token.back() == '.';
      std::string word;
      for (const char ch : token) {
        if (ch != '.' && ch != ',') word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      EXPECT_TRUE(words.count(word)) << "unknown word '" << word << "'";
      if (previous == "a") {
        EXPECT_EQ(std::string("aeiou").find(word[0]), std::string::npos) << word;
      }
      previous = word;
    }
  }
  EXPECT_GT(sentences, 200);
}

TEST(CharCorpus, SameSeedSameTextOtherSeedOtherText) {
  EXPECT_EQ(make_char_corpus(3000, 5), make_char_corpus(3000, 5));
  EXPECT_NE(make_char_corpus(3000, 5), make_char_corpus(3000, 6));
}

TEST(CharCorpus, GoldenBits) {
  // Pins the grammar and the draw order; integers only, so exact everywhere.
  EXPECT_EQ(make_char_corpus(120, 1),
            "One wise star heard some garden. Some river painted that bright cat. Every small "
            "child painted that river. Every small h");
  EXPECT_EQ(fnv1a(make_char_corpus(100000, 1)), 2101523934192014491ULL);
}

// ---------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------

TEST(Tokenizer, EncodesAgainstAHandWorkedExample) {
  const CharCorpus c = encode_chars("banana");
  EXPECT_EQ(c.vocab, "abn");
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 0, 2, 0, 2, 0}));
  EXPECT_EQ(decode_chars(c, c.tokens), "banana");

  const CharCorpus empty = encode_chars("");
  EXPECT_TRUE(empty.vocab.empty());
  EXPECT_TRUE(empty.tokens.empty());
}

TEST(Tokenizer, SortsBytesAsUnsigned) {
  // '\xff' and the UTF-8 bytes of "é" (0xc3 0xa9) sort after ASCII on every
  // platform, whether `char` is signed or not.
  const std::string text = "z\xc3\xa9" "A\xff\n";
  const CharCorpus c = encode_chars(text);
  EXPECT_EQ(c.vocab, std::string("\nAz\xa9\xc3\xff"));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{2, 4, 3, 1, 5, 0}));
  EXPECT_EQ(decode_chars(c, c.tokens), text);
}

TEST(Tokenizer, EncodeTextUsesTheCorpusVocabulary) {
  const CharCorpus c = encode_chars("hello world");
  EXPECT_EQ(c.vocab, " dehlorw");
  EXPECT_EQ(encode_text(c, "low"), (std::vector<int32_t>{4, 5, 7}));
  try {
    encode_text(c, "hex");
    ADD_FAILURE() << "no exception for 'x'";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'text'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("position 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const CharCorpus c = encode_chars("abc");
  for (const int32_t bad : {-1, 3}) {
    const std::vector<int32_t> tokens = {0, bad};
    try {
      decode_chars(c, tokens);
      ADD_FAILURE() << "no exception for id " << bad;
    } catch (const dtl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'tokens'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
  }
}

TEST(Tokenizer, CorpusRoundTripsThroughAFile) {
  testing::TempDir dir;
  const std::string text = make_char_corpus(50000, 2);
  const auto file = dir.write("corpus.txt", text);
  const std::string loaded = load_text(file);
  ASSERT_EQ(loaded, text);
  const CharCorpus c = encode_chars(loaded);
  EXPECT_EQ(c.tokens.size(), text.size());
  EXPECT_EQ(decode_chars(c, c.tokens), text);
}

// ---------------------------------------------------------------------------
// load_text
// ---------------------------------------------------------------------------

TEST(LoadText, ReadsEveryByte) {
  testing::TempDir dir;
  const std::string bytes("line one\r\nzero \0 byte\n\xff", 23);
  EXPECT_EQ(load_text(dir.write("bytes.bin", bytes)), bytes);
  EXPECT_EQ(load_text(dir.write("empty.txt", "")), "");
}

TEST(LoadText, MissingFileOrFolderIsAClearError) {
  testing::TempDir dir;
  const auto missing = dir.path() / "no_such_file.txt";
  try {
    load_text(missing);
    ADD_FAILURE() << "no exception";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
  try {
    load_text(dir.path());
    ADD_FAILURE() << "no exception";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST(CopyWindows, WindowsAndTheirTargets) {
  CharCorpus c;
  c.vocab = "abcdefghij";
  c.tokens = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};  // 10 tokens, context 2: starts taken mod 10 - 3 = 7
  std::vector<int32_t> x(6), y(6);
  copy_windows(c, 1, 2, x, y);  // windows 1, 2, 3 start at 3, 6 and 9 mod 7 = 2
  EXPECT_EQ(x, (std::vector<int32_t>{3, 4, 6, 7, 2, 3}));
  EXPECT_EQ(y, (std::vector<int32_t>{4, 5, 7, 8, 3, 4}));
  std::vector<int32_t> odd(5);
  EXPECT_THROW(copy_windows(c, 0, 2, odd, odd), dtl::InvalidArgument);
  EXPECT_THROW(copy_windows(c, 0, 2, x, odd), dtl::InvalidArgument);
  EXPECT_THROW(copy_windows(c, 0, 0, x, y), dtl::InvalidArgument);
  std::vector<int32_t> nine(9);  // 10 tokens cannot hold a window of 9 and its target (11 needed)
  EXPECT_THROW(copy_windows(c, 0, 9, nine, nine), dtl::InvalidArgument);
}

}  // namespace
}  // namespace dtl::data
