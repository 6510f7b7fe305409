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
  // TODO(student): Start unit u's all-gather of every rank's shard into full_values (storage allocated
  //   again), so that once it completes full_values holds the unit's padded FlatParameter.
  //   With a 16-bit param_dtype the gather sends and receives param_dtype (rounded from the
  //   shard, in kCommunication tensors) and wait_gather() widens. With offload the shard is
  //   host memory: no collective may touch it (Note [CPU offload]). Record the Work, the
  //   gather as issued and in flight (max_in_flight), and count allgathers and
  //   allgather_bytes (the bytes actually on the wire) (Note [Gather and free], Note [Mixed
  //   precision in FSDP], handout Task C).
  throw dtl::NotImplemented("ShardedTrainer::issue_gather");
}

void ShardedTrainer::wait_gather(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // TODO(student): Once this returns, unit u's full_values hold the gathered f32 values, the gather is no
  //   longer in flight, and no 16-bit gather buffer of u is left allocated. Waiting twice is
  //   harmless (handout Task C).
  throw dtl::NotImplemented("ShardedTrainer::wait_gather");
}

void ShardedTrainer::free_params(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // TODO(student): Give back full_values' memory and mark unit u not gathered; the views stay bound, so a
  //   read before the next gather throws (Note [Gather and free]).
  throw dtl::NotImplemented("ShardedTrainer::free_params");
}

void ShardedTrainer::gather_for_use(int u, int direction) {
  // TODO(student): On return unit u's full values are gathered. Meanwhile start up to options_.prefetch
  //   further gathers of the units that will be needed next in `direction`, never more than 1
  //   + prefetch units gathered or in flight at once (the rate limiter), never one twice
  //   (Note [Prefetch and the rate limiter], handout Task C; Prefetch.* checks the counts).
  throw dtl::NotImplemented("ShardedTrainer::gather_for_use");
}

}  // namespace dtl::lab06
