// DistributedSampler: which rows each rank visits in an epoch.
//
// What this file teaches: data parallelism needs no communication to split
// the data. Every rank computes the *same* permutation (same seed, same epoch,
// same portable Rng), makes it a multiple of world_size long, and keeps every
// world_size-th entry starting at its own rank. The ranks' slices are disjoint
// by construction, and the gradient allreduce later averages over a batch
// that is, in effect, world_size times larger.
//
// Why equal counts matter: in DDP every rank calls the allreduce once per
// step. A rank with one batch fewer than the others would skip the last
// allreduce and the rest would wait for it forever. So the list is padded (or
// cut) to num_samples * world_size before slicing. This is what PyTorch's
// torch.utils.data.distributed.DistributedSampler does, order included.
#include <numeric>
#include <string>
#include <utility>

#include "datasets/datasets.h"

namespace dtl::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size,
                                       uint64_t seed, bool shuffle, bool drop_last)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last),
      num_samples_(0) {
  DTL_REQUIRE_ARG(dataset_size >= 0, "DistributedSampler", "dataset_size",
                  "is " + std::to_string(dataset_size) + "; need >= 0");
  DTL_REQUIRE_ARG(world_size >= 1, "DistributedSampler", "world_size",
                  "is " + std::to_string(world_size) + "; need >= 1");
  DTL_REQUIRE_ARG(rank >= 0 && rank < world_size, "DistributedSampler", "rank",
                  "is " + std::to_string(rank) + "; need a rank in [0, " +
                      std::to_string(world_size) + ")");
  // Pad up (ceil) or cut down (floor) to a multiple of world_size.
  num_samples_ = drop_last ? dataset_size / world_size
                           : (dataset_size + world_size - 1) / world_size;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  DTL_REQUIRE_ARG(epoch >= 0, "DistributedSampler::set_epoch", "epoch",
                  "is " + std::to_string(epoch) + "; need >= 0");
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices() const {
  // 1. The shared order of all N rows: identical on every rank.
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    // Fisher–Yates from the back: position k swaps with a uniform position in
    // [0, k], which makes every permutation equally likely. Seeded with
    // seed + epoch, as torch does: a new order each epoch, the same on every rank.
    Rng rng(seed_ + static_cast<uint64_t>(epoch_));
    for (int64_t k = dataset_size_ - 1; k > 0; --k) {
      const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(k) + 1));
      std::swap(order[k], order[j]);
    }
  }

  // 2. Rank r takes positions r, r + W, r + 2W, ... of the list made total_size()
  //    long. Positions past N wrap around to the start of `order` (padding:
  //    those rows repeat); with drop_last, total_size() <= N and nothing wraps.
  std::vector<int64_t> mine(static_cast<size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) {
    const int64_t position = rank_ + k * world_size_;
    mine[k] = order[position % dataset_size_];
  }
  return mine;
}

}  // namespace dtl::data
