// Lab 09: the pieces without communication — task A's shards against the
// test's own prefix-sum rule and their properties, task B's vector clock and
// read rule against the definitions, tables written by hand. They run the same
// on every rank (no MPI inside).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "harness/error.h"
#include "labs/09_parameter_server/tests/ps_test_util.h"

namespace lab09_test {
namespace {

// The test's statement of the rule (Note [Roles and keys]): bound s+1 is the
// smallest k > bound s whose prefix sum reaches (s + 1) total / S, capped so
// that each later range keeps a key.
std::vector<int> expected_bounds(const std::vector<std::int64_t>& sizes, int S) {
  const int K = static_cast<int>(sizes.size());
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(K) + 1, 0);
  for (int k = 0; k < K; ++k) prefix[static_cast<std::size_t>(k) + 1] = prefix[static_cast<std::size_t>(k)] + sizes[static_cast<std::size_t>(k)];
  std::vector<int> b{0};
  for (int s = 0; s + 1 < S; ++s) {
    const std::int64_t share = (s + 1) * prefix.back() / S;
    int k = b.back() + 1;
    while (k < K - (S - 1 - s) && prefix[static_cast<std::size_t>(k)] < share) ++k;
    b.push_back(k);
  }
  b.push_back(K);
  return b;
}

std::string text(const std::vector<int>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

TEST(ShardKeys, HandWrittenExamples) {
  EXPECT_EQ(text(lab09::shard_keys(std::vector<std::int64_t>{6, 2, 2, 6, 2, 2}, 2)), "{0, 3, 6}");
  EXPECT_EQ(text(lab09::shard_keys(std::vector<std::int64_t>{6, 2, 2, 6, 2, 2}, 1)), "{0, 6}");
  EXPECT_EQ(text(lab09::shard_keys(std::vector<std::int64_t>{6, 2, 2, 6, 2, 2}, 6)), "{0, 1, 2, 3, 4, 5, 6}");
  // One huge key first: the second range must still get keys, and the third one.
  EXPECT_EQ(text(lab09::shard_keys(std::vector<std::int64_t>{100, 1, 1, 1}, 3)), "{0, 1, 2, 4}");
  // The MLP of the tests: fc0 (32, 16), fc1 (256, 16), head (48, 3); 371 elements.
  EXPECT_EQ(text(lab09::shard_keys(key_sizes_of(make_model()), 2)), "{0, 3, 6}");
  EXPECT_EQ(text(lab09::shard_keys(key_sizes_of(make_model()), 3)), "{0, 3, 4, 6}");
}

TEST(ShardKeys, RandomSizesFollowTheRuleAndAreContiguous) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int K = 1 + static_cast<int>(rng() % 12);
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(K));
    for (auto& n : sizes) n = 1 + static_cast<std::int64_t>(rng() % (trial % 2 ? 1000 : 10));
    const int S = 1 + static_cast<int>(rng() % static_cast<unsigned>(K));
    const std::vector<int> got = lab09::shard_keys(sizes, S);
    ASSERT_EQ(text(got), text(expected_bounds(sizes, S))) << "K = " << K << ", S = " << S << ", trial " << trial;
  }
}

TEST(ShardKeys, BadArgumentsAreRefused) {
  EXPECT_THROW(lab09::shard_keys(std::vector<std::int64_t>{}, 1), dtl::InvalidArgument);
  EXPECT_THROW(lab09::shard_keys(std::vector<std::int64_t>{1, 2}, 3), dtl::InvalidArgument);
  EXPECT_THROW(lab09::shard_keys(std::vector<std::int64_t>{1, 2}, 0), dtl::InvalidArgument);
  EXPECT_THROW(lab09::shard_keys(std::vector<std::int64_t>{1, 0}, 1), dtl::InvalidArgument);
}

TEST(ServerOf, EveryKeyToItsRange) {
  const std::vector<int> bounds{0, 3, 4, 9};
  const int want[9] = {0, 0, 0, 1, 2, 2, 2, 2, 2};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(lab09::server_of(bounds, k), want[k]) << "key " << k;
  EXPECT_THROW(lab09::server_of(bounds, 9), dtl::InvalidArgument);
  EXPECT_THROW(lab09::server_of(bounds, -1), dtl::InvalidArgument);
}

// ---------------------------------------------------------------------------
// Task B
// ---------------------------------------------------------------------------

TEST(VectorClock, TicksMinimumAndLostWorkers) {
  lab09::VectorClock c(3);
  EXPECT_EQ(c.min(), 0);
  EXPECT_EQ(c.tick(1), 1);
  EXPECT_EQ(c.tick(1), 2);
  EXPECT_EQ(c.tick(2), 1);
  EXPECT_EQ(c.min(), 0) << "worker 0 has not ticked: the minimum is its 0";
  EXPECT_EQ(c.tick(0), 1);
  EXPECT_EQ(c.min(), 1);
  c.lose(0);
  EXPECT_FALSE(c.live(0));
  EXPECT_EQ(c.at(0), 1) << "a lost worker keeps its clock, for the record";
  EXPECT_EQ(c.tick(2), 2);
  EXPECT_EQ(c.min(), 2) << "clocks {1 (lost), 2, 2}: the lost worker no longer holds the minimum";
  EXPECT_THROW(c.tick(0), dtl::InvalidArgument) << "a lost worker's clock does not move";
  c.lose(1);
  c.lose(2);
  EXPECT_EQ(c.min(), 2) << "every worker lost: the largest clock";
  EXPECT_THROW(lab09::VectorClock(0), dtl::InvalidArgument);
  EXPECT_THROW(c.tick(3), dtl::InvalidArgument);
}

TEST(VectorClock, MayReadIsEachModelsRule) {
  using lab09::VectorClock;
  for (int clock = 0; clock < 8; ++clock) {
    for (int version = 0; version <= clock; ++version) {
      for (int s = 0; s < 4; ++s) {
        const std::string at = "clock " + std::to_string(clock) + ", version " + std::to_string(version) +
                               ", s = " + std::to_string(s);
        EXPECT_EQ(VectorClock::may_read(Consistency::kBsp, s, clock, version), version >= clock) << "BSP, " << at;
        EXPECT_EQ(VectorClock::may_read(Consistency::kSsp, s, clock, version), clock - version <= s) << "SSP, " << at;
        EXPECT_TRUE(VectorClock::may_read(Consistency::kAsp, s, clock, version)) << "ASP, " << at;
      }
    }
  }
}

}  // namespace
}  // namespace lab09_test
