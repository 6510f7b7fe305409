// Lab 06, task C: FSDP's parameter side — gather a unit before each use, free it
// after, and prefetch the next units' gathers under a limit.
//
// What this file teaches: the life of a unit's full parameters in FSDP (ZeRO-3).
// The invariants: a unit's full values exist only from its gather to its free, and
// are complete whenever the unit computes; at no time are more than 1 + prefetch
// units gathered or in flight; no unit is gathered twice at once. Which hook issues,
// waits for and frees which gather is handout Task C (Hint 2 plays it for four
// units). Without prefetch (0) every gather is issued and waited for in its own
// hook: the unit waits for the whole gather, the communication is fully exposed.
// See Note [Gather and free], Note [Prefetch and the rate limiter] and Note [Mixed
// precision in FSDP] in lab06/fsdp.h.
#include <algorithm>
#include <cstdint>
#include <string>

#include "harness/error.h"
#include "lab06/fsdp.h"

namespace dtl::lab06 {

void ShardedTrainer::issue_gather(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  if (st.gather_issued) return;
  // BEGIN SOLUTION(ShardedTrainer::issue_gather)
  // | Start unit u's all-gather of every rank's shard into full_values (storage allocated
  // | again), so that once it completes full_values holds the unit's padded FlatParameter.
  // | With a 16-bit param_dtype the gather sends and receives param_dtype (rounded from the
  // | shard, in kCommunication tensors) and wait_gather() widens. With offload the shard is
  // | host memory: no collective may touch it (Note [CPU offload]). Record the Work, the
  // | gather as issued and in flight (max_in_flight), and count allgathers and
  // | allgather_bytes (the bytes actually on the wire) (Note [Gather and free], Note [Mixed
  // | precision in FSDP], handout Task C).
  st.full_values.storage()->allocate();
  nn::Tensor mine = st.shard;
  if (options_.offload) {
    upload_shard(u);
    mine = st.full_values.view(st.layout.shard_begin(backend_.rank()), {st.layout.shard});
  }
  const nn::DType pd = options_.param_dtype;
  const auto shard = static_cast<std::size_t>(st.layout.shard);
  if (pd == nn::DType::kF32) {
    st.gather = backend_.allgather(mine.raw(), st.full_values.raw(), shard, DType::kF32);
    current_.allgather_bytes += st.layout.padded * 4;
  } else {
    st.half_shard = nn::Tensor::zeros({st.layout.shard}, pd, nn::MemoryCategory::kCommunication);
    nn::convert(st.half_shard, mine);
    st.half_full = nn::Tensor::zeros({st.layout.padded}, pd, nn::MemoryCategory::kCommunication);
    st.gather = backend_.allgather(st.half_shard.raw(), st.half_full.raw(), shard,
                                pd == nn::DType::kF16 ? DType::kF16 : DType::kBF16);
    current_.allgather_bytes += st.layout.padded * 2;
  }
  st.gather_issued = true;
  ++current_.allgathers;
  current_.max_in_flight = std::max(current_.max_in_flight, ++in_flight_);
  // END SOLUTION
}

void ShardedTrainer::wait_gather(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::wait_gather)
  // | Once this returns, unit u's full_values hold the gathered f32 values, the gather is no
  // | longer in flight, and no 16-bit gather buffer of u is left allocated. Waiting twice is
  // | harmless (handout Task C).
  if (st.gather.completed()) return;
  wait_timed(st.gather, "allgather " + st.name);
  --in_flight_;
  if (options_.param_dtype != nn::DType::kF32) {
    nn::convert(st.full_values, st.half_full);
    st.half_full = nn::Tensor();
    st.half_shard = nn::Tensor();
  }
  // END SOLUTION
}

void ShardedTrainer::free_params(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::free_params)
  // | Give back full_values' memory and mark unit u not gathered; the views stay bound, so a
  // | read before the next gather throws (Note [Gather and free]).
  st.full_values.storage()->release();
  st.gather_issued = false;
  // END SOLUTION
}

void ShardedTrainer::gather_for_use(int u, int direction) {
  // BEGIN SOLUTION(ShardedTrainer::gather_for_use)
  // | On return unit u's full values are gathered. Meanwhile start up to options_.prefetch
  // | further gathers of the units that will be needed next in `direction`, never more than 1
  // | + prefetch units gathered or in flight at once (the rate limiter), never one twice
  // | (Note [Prefetch and the rate limiter], handout Task C; Prefetch.* checks the counts).
  // With units 0..3 and prefetch = 1 (g = issue a gather, w = wait for it, f = free):
  //
  //     hook             issues        waits   gathered or in flight after the hook
  //     pre_forward(0)   g0 g1         w0      {0, 1}       <- 1 + prefetch units at most
  //     post_forward(0)                        {1}          f0
  //     pre_forward(1)   g2            w1      {1, 2}
  //     ...
  //     pre_forward(3)                 w3      {3}          (no unit 4 to prefetch)
  //     post_forward(3)                        {}           f3
  //     pre_backward(3)  g3 g2         w3      {3, 2}       backward prefetches downwards
  //     post_backward(3)                       {2}          reduce-scatter 3 (task B), f3
  //     ...
  issue_gather(u);
  const int units = unit_count();
  for (int i = 1; i <= options_.prefetch; ++i) {
    const int v = u + i * direction;
    if (v < 0 || v >= units) break;
    if (units_[static_cast<std::size_t>(v)].gather_issued) continue;
    const auto held = std::count_if(units_.begin(), units_.end(), [](const UnitState& s) { return s.gather_issued; });
    if (held >= 1 + options_.prefetch) break;
    issue_gather(v);
  }
  wait_gather(u);
  // END SOLUTION
}

}  // namespace dtl::lab06
