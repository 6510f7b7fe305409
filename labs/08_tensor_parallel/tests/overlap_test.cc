// Lab 08, task F: the overlapped row-parallel Linear layer against the unsplit
// nn::Linear (forward, backward, every gradient) at T = the test's rank count,
// for chunk counts that divide the rows, that do not, and that exceed them; bit
// for bit on integer-valued data; the chunks' allreduces recorded in row order,
// each issued when its rows of the product are in the output and the next
// chunk's are not yet; no communication in backward.
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

}  // namespace
}  // namespace lab08_test
