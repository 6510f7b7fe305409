// Lab 08 hidden tests of task F (an example set), at 5 and 6 ranks: the overlapped
// row-parallel layer at T = 5 and 6 against the unsplit layer, for every chunk
// count from 1 to 7 and a prime one above the rows, row counts that no chunk count
// divides, (B, S, C) inputs, f64 and f32, bit for bit on integers; the chunks
// recorded in row order, each issued as it is computed. Same oracles as the
// public tests (tests/overlap_test_util.h).
#include <gtest/gtest.h>

#include <vector>

#include "labs/08_tensor_parallel/tests/overlap_test_util.h"

namespace lab08_test {
namespace {

TEST(HiddenOverlap, EveryChunkCount) {
  const int T = comm().size();
  for (const nn::Shape& lead : std::vector<nn::Shape>{{1}, {11}, {12}, {3, 5}}) {
    for (int chunks : {1, 2, 3, 4, 5, 6, 7, 13}) {
      check_overlapped(lead, T, 3, chunks % 3 != 0, chunks, random_of, kTol);  // one input feature per rank
    }
  }
  check_overlapped({2, 7}, 2 * T, 6, true, 4, random_of, 1e-5, nn::DType::kF32);
  check_overlapped({13}, 2 * T, 2, true, 6, integers_of, 0.0);
}

TEST(HiddenOverlap, ChunksInRowOrderAsComputed) {
  for (int chunks : {5, 6, 7}) check_chunks(17, chunks);
  check_chunks(2, 13);
  check_chunks(30, 30);  // one row per chunk
}

}  // namespace
}  // namespace lab08_test
