// Lab 08 hidden tests of task F (an example set), at 5 and 6 ranks: the overlapped
// row-parallel layer at T = 5 and 6 against the unsplit layer, for every chunk
// count from 1 to 7 and a prime one above the rows, row counts that no chunk count
// divides, (B, S, C) inputs, f64 and f32, bit for bit on integers; the chunks
// recorded in row order, each issued as it is computed. Task F2, the same layer
// with sequence parallelism at T = 5 and 6: this rank's tokens against the unsplit
// layer for chunk counts 1 to 7 and 13, one token per rank, (B, S, C) and
// (B1, B2, S, C), f32, bit for bit on integers; each reduce-scatter issued as its
// blocks are computed. Same oracles as the public tests (tests/overlap_test_util.h).
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

TEST(HiddenOverlapSequence, EveryChunkCount) {
  const int T = comm().size();
  for (const nn::Shape& shape : std::vector<nn::Shape>{{T, T}, {2 * T, T}, {3, 3 * T, 2 * T}, {2, 2, T, T}}) {
    for (int chunks : {1, 2, 3, 4, 5, 6, 7, 13}) check_overlapped_sp(shape, 3, chunks % 3 != 0, chunks, random_of, kTol);
  }
  check_overlapped_sp({2, 4 * T, 2 * T}, 6, true, 5, random_of, 1e-5, nn::DType::kF32);
  check_overlapped_sp({3, 2 * T, T}, 2, true, 6, integers_of, 0.0);
}

TEST(HiddenOverlapSequence, ChunksIssuedAsComputed) {
  const int T = comm().size();
  for (int chunks : {5, 6, 7}) check_sp_chunks(3, 5 * T, chunks);  // 15 rows of y per rank
  check_sp_chunks(2, T, 13);       // one token per rank, two sequences: two chunks
  check_sp_chunks(4, 3 * T, 12);   // one row of y per chunk
}

}  // namespace
}  // namespace lab08_test
