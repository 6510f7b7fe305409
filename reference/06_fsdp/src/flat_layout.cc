// Lab 06, task A: the arithmetic of a FlatParameter and of re-sharding.
//
// What this file teaches: sharding is index arithmetic on one flat buffer.
// Everything FSDP moves — the shards the optimizer steps, the blocks that
// reduce_scatter and allgather exchange, the slices a checkpoint is re-sharded
// from — is a range [begin, end) of a unit's padded flat buffer. See Note
// [FlatParameter] and Note [Sharded checkpoints] in lab06/fsdp.h.
//
// Re-sharding, worked: numel 10 saved at W = 4 (shard 3), loaded at W' = 3 (shard 4):
//
//     element     0 1 2 | 3 4 5 | 6 7 8 | 9 . .        old ranks 0..3 (. = padding)
//     new rank 0  0 1 2 3            -> old 0 [0, 3), old 1 [0, 1)
//     new rank 1          4 5 6 7    -> old 1 [1, 3), old 2 [0, 2)
//     new rank 2                  8 9 . .  -> old 2 [2, 3), old 3 [0, 1); 2 elements of padding
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab06/fsdp.h"

namespace dtl::lab06 {

FlatLayout make_flat_layout(std::span<const std::int64_t> numels, int world_size) {
  DTL_REQUIRE_ARG(world_size >= 1, "make_flat_layout", "world_size",
                  "is " + std::to_string(world_size) + "; it must be at least 1");
  for (std::size_t i = 0; i < numels.size(); ++i) {
    DTL_REQUIRE_ARG(numels[i] >= 0, "make_flat_layout", "numels",
                    "has a negative count (" + std::to_string(numels[i]) + ") at index " + std::to_string(i));
  }
  FlatLayout layout;
  layout.world_size = world_size;
  layout.numels.assign(numels.begin(), numels.end());
  // BEGIN SOLUTION(make_flat_layout)
  // | Complete `layout` (returned below) as Note [FlatParameter] (lab06/fsdp.h) defines it:
  // | each parameter's offset with the parameters laid end to end in forward order, numel
  // | their total, padded the smallest multiple of world_size not below numel, shard padded /
  // | world_size (the header's example must come out; handout Task A). The argument checks
  // | are written above.
  std::int64_t offset = 0;
  for (const std::int64_t n : numels) {
    layout.offsets.push_back(offset);
    offset += n;
  }
  layout.numel = offset;
  layout.padded = (offset + world_size - 1) / world_size * world_size;
  layout.shard = layout.padded / world_size;
  // END SOLUTION
  return layout;
}

std::vector<ShardSource> reshard_sources(std::int64_t numel, int old_world_size, int new_world_size, int new_rank) {
  DTL_REQUIRE_ARG(numel >= 0, "reshard_sources", "numel", "is negative (" + std::to_string(numel) + ")");
  DTL_REQUIRE_ARG(old_world_size >= 1, "reshard_sources", "old_world_size",
                  "is " + std::to_string(old_world_size) + "; it must be at least 1");
  DTL_REQUIRE_ARG(new_world_size >= 1, "reshard_sources", "new_world_size",
                  "is " + std::to_string(new_world_size) + "; it must be at least 1");
  DTL_REQUIRE_ARG(new_rank >= 0 && new_rank < new_world_size, "reshard_sources", "new_rank",
                  "is " + std::to_string(new_rank) + "; it must be in [0, " + std::to_string(new_world_size) + ")");
  std::vector<ShardSource> sources;
  // BEGIN SOLUTION(reshard_sources)
  // | Fill `sources` (returned below) with the ShardSource slices the header of
  // | reshard_sources() specifies: together they cover the real elements of new_rank's new
  // | shard exactly once, in increasing new_offset, each slice inside one old shard, count >
  // | 0; nothing for padding (the header's example must come out; handout Task A, Note
  // | [Sharded checkpoints]).
  const std::int64_t old_shard = (numel + old_world_size - 1) / old_world_size;
  const std::int64_t new_shard = (numel + new_world_size - 1) / new_world_size;
  const std::int64_t begin = static_cast<std::int64_t>(new_rank) * new_shard;
  const std::int64_t end = std::min(begin + new_shard, numel);
  for (std::int64_t e = begin; e < end;) {
    const std::int64_t old_rank = e / old_shard;
    const std::int64_t old_offset = e % old_shard;
    const std::int64_t count = std::min(old_shard - old_offset, end - e);
    sources.push_back({static_cast<int>(old_rank), old_offset, e - begin, count});
    e += count;
  }
  // END SOLUTION
  return sources;
}

}  // namespace dtl::lab06
