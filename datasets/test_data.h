/// @file
/// @brief The two small data sets the labs' tests train on, made once per process.
///
/// Labs 04–08 check their distributed training against one process on the same
/// rows, so every rank of every test must see exactly the same data: a 20,000-
/// character corpus (seed 7) and 3,000 points of 3 spirals (noise 0.1, seed 11).
/// Lab 09 also trains to a target accuracy, in its tests and its benchmark alike,
/// on calmer spirals (noise 0.05, seed 1). One definition here keeps the labs'
/// tests, their hidden tests and the benchmarks that share them on the same rows.
#pragma once

#include "datasets/datasets.h"

namespace dtl::data::testing {

/// @brief The tests' character corpus, encoded: make_char_corpus(20000, 7).
/// @return the corpus, built on first use.
inline const CharCorpus& corpus() {
  static const CharCorpus c = encode_chars(make_char_corpus(20000, 7));
  return c;
}

/// @brief The tests' spirals: make_spirals(3000, 3, 0.1f, 11).
/// @return the data set, built on first use.
inline const Classification& spirals() {
  static const Classification d = make_spirals(3000, 3, 0.1f, 11);
  return d;
}

/// @brief Spirals to train to a held-out accuracy on: make_spirals(3000, 3, 0.05f, 1).
/// Lab 09 trains on the first 2,400 rows and measures accuracy on the last 600.
/// @return the data set, built on first use.
inline const Classification& target_spirals() {
  static const Classification d = make_spirals(3000, 3, 0.05f, 1);
  return d;
}

}  // namespace dtl::data::testing
