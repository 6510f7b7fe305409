// Lab 04, task B: assign_buckets() against hand-worked answers, and the
// Reducer's buckets on a model whose parameter sizes are known.
//
// The model: make_mlp(in 4, hidden 8, classes 3, depth 2) has, in forward order,
//   fc0.weight 32, fc0.bias 8, fc1.weight 64, fc1.bias 8, head.weight 24, head.bias 3
// elements (x4 bytes: 128, 32, 256, 32, 96, 12).
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "harness/error.h"
#include "labs/04_bucketed_ddp/tests/ddp_test_util.h"

namespace lab04_test {
namespace {

using Buckets = std::vector<std::vector<int>>;

Buckets assign(std::vector<std::size_t> bytes, std::size_t cap, std::size_t first) {
  return lab04::assign_buckets(bytes, cap, first);
}

TEST(AssignBuckets, ReverseOrderUnderTheCap) {
  // 5 parameters of 10 bytes, cap 25: two per bucket, from the last parameter.
  EXPECT_EQ(assign({10, 10, 10, 10, 10}, 25, 25), (Buckets{{4, 3}, {2, 1}, {0}}));
}

TEST(AssignBuckets, FirstBucketHasItsOwnCap) {
  EXPECT_EQ(assign({10, 10, 10, 10, 10}, 100, 15), (Buckets{{4}, {3, 2, 1, 0}}));
  EXPECT_EQ(assign({40, 4, 400, 4, 40}, 100, 50), (Buckets{{4, 3}, {2}, {1, 0}}));  // the header's example
}

TEST(AssignBuckets, ParameterLargerThanTheCapIsAlone) {
  EXPECT_EQ(assign({8, 1000, 8}, 64, 64), (Buckets{{2}, {1}, {0}}));
  EXPECT_EQ(assign({1000}, 64, 64), (Buckets{{0}}));
  EXPECT_EQ(assign({1000, 2000}, 64, 16), (Buckets{{1}, {0}}));
}

TEST(AssignBuckets, ExactlyAtTheCapClosesTheBucket) {
  // 16 + 16 = 32 = cap: closed; the next parameter opens a new bucket.
  EXPECT_EQ(assign({16, 16, 16, 16}, 32, 32), (Buckets{{3, 2}, {1, 0}}));
  EXPECT_EQ(assign({8, 24, 8, 24}, 32, 32), (Buckets{{3, 2}, {1, 0}}));
  // One byte more does not fit.
  EXPECT_EQ(assign({17, 16, 16}, 32, 32), (Buckets{{2, 1}, {0}}));
}

TEST(AssignBuckets, EdgeCases) {
  EXPECT_EQ(assign({}, 32, 32), Buckets{});
  EXPECT_EQ(assign({4}, 32, 32), (Buckets{{0}}));
  EXPECT_EQ(assign({4, 4, 4}, 1 << 20, 1 << 20), (Buckets{{2, 1, 0}}));  // everything in one bucket
  EXPECT_EQ(assign({4, 4, 4}, 1, 1), (Buckets{{2}, {1}, {0}}));          // naive: one per parameter
}

TEST(AssignBuckets, RejectsZeroCaps) {
  EXPECT_THROW(assign({4}, 0, 32), dtl::InvalidArgument);
  EXPECT_THROW(assign({4}, 32, 0), dtl::InvalidArgument);
}

TEST(AssignBuckets, EveryParameterOnceAndCapsHold) {
  // A sweep: sizes 4..4000 bytes in a fixed pattern, several caps.
  std::vector<std::size_t> bytes;
  for (int i = 0; i < 57; ++i) bytes.push_back(4 * static_cast<std::size_t>(1 + (i * 37) % 1000));
  for (std::size_t cap : {std::size_t{64}, std::size_t{1000}, std::size_t{4096}, std::size_t{100000}}) {
    const Buckets got = assign(bytes, cap, cap / 4 + 1);
    int expect_next = static_cast<int>(bytes.size()) - 1;
    for (std::size_t b = 0; b < got.size(); ++b) {
      std::size_t sum = 0;
      for (int i : got[b]) {
        EXPECT_EQ(i, expect_next) << "cap " << cap << ": bucket " << b << " is not in reverse order";
        --expect_next;
        sum += bytes[static_cast<std::size_t>(i)];
      }
      const std::size_t limit = b == 0 ? cap / 4 + 1 : cap;
      EXPECT_TRUE(sum <= limit || got[b].size() == 1) << "cap " << cap << ": bucket " << b << " has " << sum << " B";
      // Maximal: the next parameter would not have fitted (unless this is the last bucket).
      if (b + 1 < got.size() && sum < limit) {
        EXPECT_GT(sum + bytes[static_cast<std::size_t>(got[b + 1].front())], limit) << "cap " << cap;
      }
    }
    EXPECT_EQ(expect_next, -1) << "cap " << cap << ": not every parameter is in a bucket";
  }
}

// The model of the file header; every rank builds the same one (Reducer is collective).
nn::Model known_model() { return nn::make_mlp(4, 8, 3, 2, 5); }

TEST(ReducerBuckets, ViewsOfTheFlatGradientBuffer) {
  nn::Model model = known_model();
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  // Sizes in bytes (forward): 128 32 256 32 96 12. First cap 108: {5, 4}; cap 300:
  // {3, 2} (288), then {1, 0} (160).
  // Given explicitly (not from your assign_buckets(): that is task B's item).
  lab04::Reducer reducer(backend, model, {.mode = lab04::ReducerMode::kOverlapped,
                                          .bucket_cap_bytes = 300, .first_bucket_cap_bytes = 108,
                                          .buckets = {{5, 4}, {3, 2}, {1, 0}}});
  const auto& buckets = reducer.buckets();
  ASSERT_EQ(buckets.size(), 3u);  // no collective follows: safe
  EXPECT_EQ(buckets[0].parameters, (std::vector<int>{5, 4}));
  EXPECT_EQ(buckets[1].parameters, (std::vector<int>{3, 2}));
  EXPECT_EQ(buckets[2].parameters, (std::vector<int>{1, 0}));
  // Offsets and counts in elements of the flat buffer: 0 32 40 104 112 136 (139 total).
  EXPECT_EQ(buckets[0].offset, 112u);
  EXPECT_EQ(buckets[0].count, 27u);
  EXPECT_EQ(buckets[1].offset, 40u);
  EXPECT_EQ(buckets[1].count, 72u);
  EXPECT_EQ(buckets[2].offset, 0u);
  EXPECT_EQ(buckets[2].count, 40u);
  // No copies: every gradient is a view of the one flat buffer.
  const auto params = model.parameters();
  for (const auto* p : params) {
    EXPECT_EQ(p->grad.data<float>(), model.flat_grads().data<float>() + p->grad.offset() -
                                         model.flat_grads().offset())
        << p->name;
  }
}

TEST(ReducerBuckets, NaiveHasOneBucketPerParameter) {
  nn::Model model = known_model();
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  lab04::Reducer reducer(backend, model, {.mode = lab04::ReducerMode::kNaive});
  ASSERT_EQ(reducer.buckets().size(), 6u);
  for (int b = 0; b < 6; ++b) EXPECT_EQ(reducer.buckets()[b].parameters, std::vector<int>{5 - b});
}

// Task B's defaults, seen through the Reducer (item B: it calls your assign_buckets()).
TEST(AssignBuckets, DefaultCapsPutASmallModelInOneBucket) {
  nn::Model model = known_model();
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  lab04::Reducer reducer(backend, model);
  ASSERT_EQ(reducer.buckets().size(), 1u);
  EXPECT_EQ(reducer.buckets()[0].count, 139u);
}

}  // namespace
}  // namespace lab04_test
