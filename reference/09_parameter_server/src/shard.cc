// Lab 09, task A: the keys cut into S contiguous ranges, balanced by elements.
//
// What this file teaches: a parameter server shards by key, and a key is a
// whole tensor, so the balance is only as good as the largest key allows. Range
// s ends at the first key boundary at or past its share (s + 1) * total / S of
// the prefix sum; it must leave at least one key for each range after it.
//
// Sizes {6, 2, 2, 6, 2, 2} (total 20), S = 2:
//
//     prefix   6  8  10 | 16 18 20        range 0 ends where the prefix reaches 10
//     bounds   {0, 3, 6}                  10 and 10 elements
//
// See Note [Roles and keys] in lab09/parameter_server.h.
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

std::vector<int> shard_keys(std::span<const std::int64_t> key_sizes, int servers) {
  const int keys = static_cast<int>(key_sizes.size());
  DTL_REQUIRE_ARG(keys >= 1, "shard_keys", "key_sizes", "is empty");
  for (int k = 0; k < keys; ++k) {
    DTL_REQUIRE_ARG(key_sizes[static_cast<std::size_t>(k)] >= 1, "shard_keys", "key_sizes",
                    "key " + std::to_string(k) + " has " + std::to_string(key_sizes[static_cast<std::size_t>(k)]) +
                        " elements (at least 1)");
  }
  DTL_REQUIRE_ARG(servers >= 1 && servers <= keys, "shard_keys", "servers",
                  "is " + std::to_string(servers) + "; it must be in [1, " + std::to_string(keys) + "] (the keys)");
  // BEGIN SOLUTION(shard_keys)
  // | Return the S + 1 bounds exactly as the header's shard_keys() defines them (greedy by
  // | prefix sums, every range non-empty; its example must come out) (Note [Roles and keys],
  // | handout Task A). The argument checks are written above.
  std::int64_t total = 0;
  for (std::int64_t n : key_sizes) total += n;
  std::vector<int> bounds{0};
  int k = 0;
  std::int64_t prefix = 0;
  for (int s = 0; s + 1 < servers; ++s) {
    const std::int64_t share = (s + 1) * total / servers;
    const int last = keys - (servers - 1 - s);  // range s may end at most here
    prefix += key_sizes[static_cast<std::size_t>(k)];
    ++k;  // at least one key
    while (k < last && prefix < share) {
      prefix += key_sizes[static_cast<std::size_t>(k)];
      ++k;
    }
    bounds.push_back(k);
  }
  bounds.push_back(keys);
  return bounds;
  // END SOLUTION
}

int server_of(std::span<const int> bounds, int key) {
  DTL_REQUIRE_ARG(bounds.size() >= 2 && key >= 0 && key < bounds.back(), "server_of", "key",
                  "is " + std::to_string(key) + "; it must be in [0, " +
                      std::to_string(bounds.empty() ? 0 : bounds.back()) + ")");
  // BEGIN SOLUTION(server_of)
  // | Return the server whose range [bounds[s], bounds[s + 1]) holds `key` (checks written
  // | above).
  int s = 0;
  while (bounds[static_cast<std::size_t>(s) + 1] <= key) ++s;
  return s;
  // END SOLUTION
}

}  // namespace dtl::lab09
