// Lab 08, task F: the overlapped row-parallel Linear layer against the unsplit
// nn::Linear (forward, backward, every gradient) at T = the test's rank count,
// for chunk counts that divide the rows, that do not, and that exceed them; bit
// for bit on integer-valued data; the chunks' allreduces recorded in row order,
// each issued when its rows of the product are in the output and the next
// chunk's are not yet; no communication in backward. Task F2 (sequence
// parallelism): this rank's tokens of the unsplit layer's output, for sequence
// lengths no chunk count divides, one token per rank and more chunks than rows;
// each chunk a reduce-scatter issued with its blocks computed and the later ones
// not yet; S that T does not divide and k = 0 refused, naming the argument and rank.
#include <gtest/gtest.h>

#include <vector>

#include "labs/08_tensor_parallel/tests/overlap_test_util.h"

namespace lab08_test {
namespace {

TEST(Overlap, EqualsTheUnsplitLayer) {
  const int T = comm().size();
  // Rows N = 1, 2, 5, 7, 6 as (2, 3); chunks dividing N, not dividing it, and more than N.
  for (const nn::Shape& lead : std::vector<nn::Shape>{{1}, {2}, {5}, {7}, {2, 3}}) {
    for (int chunks : {1, 2, 3, 4, 8}) check_overlapped(lead, 2 * T, 5, chunks % 2 == 0, chunks, random_of, kTol);
  }
  check_overlapped({4}, T, 3, true, 3, random_of, kTol);  // one input feature per rank
}

TEST(Overlap, IntegerValuesEqualThePlainLayerBitForBit) {
  const int T = comm().size();
  for (const nn::Shape& lead : std::vector<nn::Shape>{{1}, {6}, {9}, {3, 4}}) {
    for (int chunks : {1, 2, 4, 5, 16}) check_overlapped(lead, 3 * T, 4, true, chunks, integers_of, 0.0);
  }
}

TEST(Overlap, ChunksAreIssuedAsTheyAreComputed) {
  for (int chunks : {1, 2, 3, 4}) check_chunks(8, chunks);
  check_chunks(7, 3);  // 2, 2, 3 rows (or another order of the sizes)
  check_chunks(1, 4);  // more chunks than rows: one allreduce
  check_chunks(3, 5);
}

TEST(Overlap, BackwardDoesNotCommunicate) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("proj", 2 * T, 4, true, 3);
  auto layer = overlapped_of(*full, tp.record, T, r, 3);
  layer->forward(random_tensor({5, 2}, 4));
  tp.record.clear();
  layer->backward(random_tensor({5, 4}, 5), {});
  EXPECT_TRUE(ops_are(tp.record, {}, {}, "the overlapped row-parallel backward (g: identity)"));
}

TEST(OverlapSequence, EqualsTheUnsplitLayerOnThisRanksTokens) {
  const int T = comm().size();
  // (S, in) and (B, S, in); S/T = 1, 3, 5 tokens per rank; chunks dividing B S/T, not, and more than it.
  for (const nn::Shape& shape : std::vector<nn::Shape>{{T, 2 * T}, {3 * T, 2 * T}, {2, 5 * T, 2 * T}, {3, T, T}}) {
    for (int chunks : {1, 2, 3, 4, 7}) check_overlapped_sp(shape, 5, chunks % 2 == 1, chunks, random_of, kTol);
  }
  check_overlapped_sp({2, 2, 2 * T, 3 * T}, 4, true, 3, random_of, kTol);  // (B1, B2, S, in)
  check_overlapped_sp({0, 2 * T, T}, 3, true, 4, random_of, kTol);          // no sequences: no collective
  check_overlapped_sp({2, 3 * T, 2 * T}, 6, true, 4, random_of, 1e-5, nn::DType::kF32);
}

TEST(OverlapSequence, IntegerValuesEqualThePlainLayerBitForBit) {
  const int T = comm().size();
  for (int chunks : {1, 2, 5, 16}) {
    check_overlapped_sp({3 * T, 3 * T}, 4, true, chunks, integers_of, 0.0);
    check_overlapped_sp({2, 2 * T, T}, 3, true, chunks, integers_of, 0.0);
  }
}

TEST(OverlapSequence, ChunksAreIssuedAsTheyAreComputed) {
  const int T = comm().size();
  for (int chunks : {1, 2, 3, 4}) check_sp_chunks(1, 4 * T, chunks);
  check_sp_chunks(3, 2 * T, 4);  // chunks that cross from one sequence into the next
  check_sp_chunks(1, T, 3);      // one token per rank: one reduce-scatter
  check_sp_chunks(2, 3 * T, 5);
}

TEST(OverlapSequence, BadArgumentsAreRefusedNamingTheArgumentAndTheRank) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("proj", 2 * T, 3, true, 33);
  const std::string rank = "rank " + std::to_string(r);
  try {
    overlapped_of(*full, tp.mpi, T, r, 0, true);
    ADD_FAILURE() << "chunks = 0 was accepted";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("chunks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(rank), std::string::npos) << e.what();
  }
  if (T == 1) return;  // every S divides into one
  auto layer = overlapped_of(*full, tp.mpi, T, r, 2, true);
  try {
    layer->forward(random_tensor({2, T + 1, 2}, 34));  // S = T + 1: T does not divide it
    ADD_FAILURE() << "a sequence of T + 1 tokens was accepted";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("x"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(rank), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lab08_test
