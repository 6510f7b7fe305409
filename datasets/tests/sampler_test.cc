// DistributedSampler, checked in one process by building the sampler of every
// rank: counts, disjointness, coverage, the documented padding, epochs and
// seeds. Oracles: closed forms (ceil/floor, torch's strided slicing), a
// permutation computed by an independent Python implementation of the
// documented shuffle, and a chi-square test of uniformity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "datasets/datasets.h"

namespace dtl::data {
namespace {

/// Every rank's indices for one epoch: result[r] is rank r's list.
std::vector<std::vector<int64_t>> all_ranks(int64_t n, int world_size, uint64_t seed, bool shuffle,
                                            bool drop_last, int64_t epoch) {
  std::vector<std::vector<int64_t>> lists;
  for (int rank = 0; rank < world_size; ++rank) {
    DistributedSampler s(n, rank, world_size, seed, shuffle, drop_last);
    s.set_epoch(epoch);
    lists.push_back(s.indices());
  }
  return lists;
}

/// The global list the ranks' slices came from: position r + k*W is rank r's k-th.
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& lists) {
  const size_t w = lists.size();
  std::vector<int64_t> global(w * lists[0].size());
  for (size_t r = 0; r < w; ++r) {
    for (size_t k = 0; k < lists[r].size(); ++k) global[r + k * w] = lists[r][k];
  }
  return global;
}

template <typename F>
void expect_invalid(F&& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no exception; expected InvalidArgument naming '" << argument << "'";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + argument + "'"), std::string::npos) << e.what();
  }
}

TEST(Sampler, BadArgumentsNameTheArgument) {
  expect_invalid([] { DistributedSampler(-1, 0, 1, 0); }, "dataset_size");
  expect_invalid([] { DistributedSampler(10, 0, 0, 0); }, "world_size");
  expect_invalid([] { DistributedSampler(10, -1, 2, 0); }, "rank");
  expect_invalid([] { DistributedSampler(10, 2, 2, 0); }, "rank");
  DistributedSampler s(10, 0, 2, 0);
  expect_invalid([&] { s.set_epoch(-1); }, "epoch");
}

TEST(Sampler, WorkedExampleFromTheReadme) {
  // N = 10, W = 3, no shuffle: the list 0..9 padded with 0 1.
  const auto padded = all_ranks(10, 3, 0, /*shuffle=*/false, /*drop_last=*/false, 0);
  EXPECT_EQ(padded[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(padded[1], (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(padded[2], (std::vector<int64_t>{2, 5, 8, 1}));
  const auto dropped = all_ranks(10, 3, 0, false, /*drop_last=*/true, 0);
  EXPECT_EQ(dropped[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(dropped[1], (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(dropped[2], (std::vector<int64_t>{2, 5, 8}));
  DistributedSampler s(10, 1, 3, 0, false, false);
  EXPECT_EQ(s.num_samples(), 4);
  EXPECT_EQ(s.total_size(), 12);
}

TEST(Sampler, ShuffleMatchesAnIndependentImplementation) {
  // Python, from the documented algorithm: Rng(seed + epoch) = Rng(10),
  // Fisher-Yates from the back with below(k + 1) gives 4 6 0 3 7 9 5 2 8 1;
  // padded with 4 6 and sliced with stride 3.
  const auto lists = all_ranks(10, 3, /*seed=*/7, /*shuffle=*/true, false, /*epoch=*/3);
  EXPECT_EQ(lists[0], (std::vector<int64_t>{4, 3, 5, 1}));
  EXPECT_EQ(lists[1], (std::vector<int64_t>{6, 7, 2, 4}));
  EXPECT_EQ(lists[2], (std::vector<int64_t>{0, 9, 8, 6}));
}

TEST(Sampler, EveryRankGetsAnEqualDisjointShareOfOnePermutation) {
  for (const int w : {1, 2, 3, 4, 7}) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{w - 1}, int64_t{10}, int64_t{1001}}) {
      for (const bool shuffle : {false, true}) {
        for (const bool drop_last : {false, true}) {
          SCOPED_TRACE("W=" + std::to_string(w) + " N=" + std::to_string(n) +
                       " shuffle=" + std::to_string(shuffle) + " drop_last=" + std::to_string(drop_last));
          const int64_t expected_per_rank = drop_last ? n / w : (n + w - 1) / w;  // floor / ceil
          const auto lists = all_ranks(n, w, 2024, shuffle, drop_last, 5);
          DistributedSampler s(n, 0, w, 2024, shuffle, drop_last);
          EXPECT_EQ(s.num_samples(), expected_per_rank);
          EXPECT_EQ(s.total_size(), expected_per_rank * w);
          for (const auto& list : lists) {
            ASSERT_EQ(static_cast<int64_t>(list.size()), expected_per_rank);
            for (const int64_t i : list) {
              ASSERT_GE(i, 0);
              ASSERT_LT(i, n);
            }
          }
          const std::vector<int64_t> global = interleave(lists);
          const auto total = static_cast<int64_t>(global.size());
          if (drop_last) {
            // The first floor(N/W)*W entries of one permutation: no index twice.
            std::vector<int64_t> sorted = global;
            std::sort(sorted.begin(), sorted.end());
            EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
          } else {
            // The first N entries are a permutation of 0..N-1 (every index is
            // covered), and the padding repeats the list from its start.
            std::vector<int64_t> head(global.begin(), global.begin() + std::min(n, total));
            std::sort(head.begin(), head.end());
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(head[i], i);
            for (int64_t p = n; p < total; ++p) EXPECT_EQ(global[p], global[p % n]) << "p=" << p;
          }
          if (!shuffle) {
            // Without shuffling the list is 0, 1, 2, ... (wrapped): closed form.
            for (int64_t p = 0; p < total; ++p) EXPECT_EQ(global[p], p % n);
          }
        }
      }
    }
  }
}

TEST(Sampler, EpochsReshuffleAndSeedsAreReproducible) {
  const auto epoch1 = all_ranks(1001, 4, 99, true, false, 1);
  EXPECT_EQ(epoch1, all_ranks(1001, 4, 99, true, false, 1));  // same epoch, same lists
  EXPECT_NE(epoch1, all_ranks(1001, 4, 99, true, false, 2));  // next epoch, new order
  EXPECT_NE(epoch1, all_ranks(1001, 4, 100, true, false, 1));  // other seed, other order
  // Without shuffle the epoch does not matter.
  EXPECT_EQ(all_ranks(1001, 4, 99, false, false, 1), all_ranks(1001, 4, 99, false, false, 7));

  // set_epoch on one sampler object: back to an earlier epoch gives it again.
  DistributedSampler s(50, 1, 2, 3);
  EXPECT_EQ(s.epoch(), 0);
  const auto first = s.indices();
  s.set_epoch(1);
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_NE(s.indices(), first);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), first);
}

TEST(Sampler, EveryPermutationIsEquallyLikely) {
  // N = 5: 120 permutations, one per epoch over 60000 epochs, 500 expected
  // each. Chi-square with 119 degrees of freedom: the 99.9% quantile is 173.
  // A classic Fisher-Yates slip (swapping with any position, not one in
  // [0, k]) fails this by far.
  std::map<std::vector<int64_t>, int> seen;
  DistributedSampler s(5, 0, 1, 31);
  const int epochs = 60000;
  for (int e = 0; e < epochs; ++e) {
    s.set_epoch(e);
    ++seen[s.indices()];
  }
  EXPECT_EQ(seen.size(), 120u);
  double chi2 = 0;
  for (const auto& [order, hits] : seen) chi2 += (hits - 500.0) * (hits - 500.0) / 500.0;
  EXPECT_LT(chi2, 173.0);
}

}  // namespace
}  // namespace dtl::data
