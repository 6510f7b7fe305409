// Task A: the FlatParameter's layout and re-sharding, against hand-worked examples
// and an element-by-element map built here.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/error.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

TEST(FlatLayout, HandWorkedExample) {
  // Note [FlatParameter]: numels {3, 5, 2} at W = 4.
  const std::vector<std::int64_t> numels = {3, 5, 2};
  const lab06::FlatLayout l = lab06::make_flat_layout(numels, 4);
  EXPECT_EQ(l.numels, numels);
  EXPECT_EQ(l.offsets, (std::vector<std::int64_t>{0, 3, 8}));
  EXPECT_EQ(l.numel, 10);
  EXPECT_EQ(l.padded, 12);
  EXPECT_EQ(l.shard, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.shard_begin(3), 9);
}

TEST(FlatLayout, PaddingIsTheNextMultipleOfTheWorldSize) {
  // The odd MLP's units (21, 56, 24 elements) at 1..6 ranks, by hand: padded = ceil(n / W) * W.
  struct Case {
    std::int64_t n;
    int w;
    std::int64_t padded;
  };
  for (const Case c : {Case{21, 1, 21}, Case{21, 2, 22}, Case{21, 4, 24}, Case{21, 5, 25}, Case{56, 3, 57},
                       Case{56, 5, 60}, Case{24, 5, 25}, Case{24, 6, 24}, Case{1, 4, 4}, Case{0, 3, 0},
                       Case{7, 7, 7}, Case{3, 8, 8}}) {
    const std::vector<std::int64_t> numels = {c.n};
    const lab06::FlatLayout l = lab06::make_flat_layout(numels, c.w);
    EXPECT_EQ(l.padded, c.padded) << c.n << " elements at W = " << c.w;
    EXPECT_EQ(l.shard * c.w, c.padded) << c.n << " elements at W = " << c.w;
    EXPECT_EQ(l.numel, c.n);
  }
}

TEST(FlatLayout, OffsetsAreRunningSumsAndEmptyParametersTakeNoSpace) {
  const std::vector<std::int64_t> numels = {4, 0, 1, 6, 0};
  const lab06::FlatLayout l = lab06::make_flat_layout(numels, 3);
  EXPECT_EQ(l.offsets, (std::vector<std::int64_t>{0, 4, 4, 5, 11}));
  EXPECT_EQ(l.numel, 11);
  EXPECT_EQ(l.padded, 12);
  EXPECT_EQ(l.shard, 4);
  const lab06::FlatLayout none = lab06::make_flat_layout(std::vector<std::int64_t>{}, 2);
  EXPECT_EQ(none.numel, 0);
  EXPECT_EQ(none.padded, 0);
  EXPECT_TRUE(none.offsets.empty());
}

TEST(FlatLayout, RejectsBadArguments) {
  const std::vector<std::int64_t> ok = {3}, bad = {3, -1};
  EXPECT_THROW(lab06::make_flat_layout(ok, 0), dtl::InvalidArgument);
  EXPECT_THROW(lab06::make_flat_layout(bad, 2), dtl::InvalidArgument);
}

TEST(ReshardSources, HandWorkedExamples) {
  // flat_layout.cc's header: numel 10 saved at W = 4 (shard 3), loaded at W' = 3 (shard 4).
  using S = lab06::ShardSource;
  auto eq = [](const std::vector<S>& got, const std::vector<S>& want) {
    if (got.size() != want.size()) return false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i].old_rank != want[i].old_rank || got[i].old_offset != want[i].old_offset ||
          got[i].new_offset != want[i].new_offset || got[i].count != want[i].count)
        return false;
    }
    return true;
  };
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 4, 3, 0), {S{0, 0, 0, 3}, S{1, 0, 3, 1}}));
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 4, 3, 1), {S{1, 1, 0, 2}, S{2, 0, 2, 2}}));
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 4, 3, 2), {S{2, 2, 0, 1}, S{3, 0, 1, 1}}));
  // 4 -> 2 (shard 5): checkpoint.cc's header.
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 4, 2, 1), {S{1, 2, 0, 1}, S{2, 0, 1, 3}, S{3, 0, 4, 1}}));
  // 4 -> 1: the whole unit, from every old shard.
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 4, 1, 0), {S{0, 0, 0, 3}, S{1, 0, 3, 3}, S{2, 0, 6, 3}, S{3, 0, 9, 1}}));
  // 1 -> 4: rank 3's shard is element 9 and padding.
  EXPECT_TRUE(eq(lab06::reshard_sources(10, 1, 4, 3), {S{0, 9, 0, 1}}));
  // A new shard that is all padding: numel 5 at W' = 4 (shard 2): rank 3 holds [6, 8).
  EXPECT_TRUE(lab06::reshard_sources(5, 2, 4, 3).empty());
  EXPECT_TRUE(lab06::reshard_sources(0, 3, 2, 1).empty());
}

// Every (numel, W, W', r') up to small sizes: the slices must copy exactly the real
// elements of the new shard from where the old sharding put them. The map is built
// element by element here: element e of the unit lives in old shard e / S at e % S.
TEST(ReshardSources, CoverEveryRealElementExactlyOnce) {
  for (std::int64_t numel = 0; numel <= 23; ++numel) {
    for (int w = 1; w <= 6; ++w) {
      for (int w2 = 1; w2 <= 6; ++w2) {
        const std::int64_t s = (numel + w - 1) / w, s2 = (numel + w2 - 1) / w2;
        for (int r2 = 0; r2 < w2; ++r2) {
          std::vector<std::int64_t> filled(static_cast<std::size_t>(s2), -1);  // unit element per new slot
          for (const lab06::ShardSource& src : lab06::reshard_sources(numel, w, w2, r2)) {
            ASSERT_GT(src.count, 0);
            ASSERT_TRUE(src.old_rank >= 0 && src.old_rank < w);
            ASSERT_TRUE(src.old_offset >= 0 && src.old_offset + src.count <= s);
            ASSERT_TRUE(src.new_offset >= 0 && src.new_offset + src.count <= s2);
            for (std::int64_t i = 0; i < src.count; ++i) {
              auto& slot = filled[static_cast<std::size_t>(src.new_offset + i)];
              ASSERT_EQ(slot, -1) << "new slot " << src.new_offset + i << " written twice";
              slot = src.old_rank * s + src.old_offset + i;
            }
          }
          for (std::int64_t j = 0; j < s2; ++j) {
            const std::int64_t e = r2 * s2 + j;
            ASSERT_EQ(filled[static_cast<std::size_t>(j)], e < numel ? e : -1)
                << "numel " << numel << ", W " << w << " -> " << w2 << ", new rank " << r2 << ", slot " << j;
          }
        }
      }
    }
  }
}

TEST(ReshardSources, RejectsBadArguments) {
  EXPECT_THROW(lab06::reshard_sources(-1, 2, 2, 0), dtl::InvalidArgument);
  EXPECT_THROW(lab06::reshard_sources(10, 0, 2, 0), dtl::InvalidArgument);
  EXPECT_THROW(lab06::reshard_sources(10, 2, 0, 0), dtl::InvalidArgument);
  EXPECT_THROW(lab06::reshard_sources(10, 2, 2, 2), dtl::InvalidArgument);
  EXPECT_THROW(lab06::reshard_sources(10, 2, 2, -1), dtl::InvalidArgument);
}

}  // namespace
}  // namespace lab06_test
