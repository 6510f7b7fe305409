// Lab 06, task C: FSDP's parameter side — gather a unit before each use, free it
// after, and prefetch the next units' gathers under a limit.
//
// What this file teaches: the life of a unit's full parameters in FSDP (ZeRO-3).
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
//
// Without prefetch (0) every gather is issued and waited for in its own hook:
// the unit waits for the whole gather, the communication is fully exposed. See
// Note [Gather and free], Note [Prefetch and the rate limiter] and Note [Mixed
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
  // TODO(student): Allocate full_values' storage again. The shard to send, `mine`: st.shard, or with
  //   offload this rank's own slice of full_values after upload_shard(u) (Note [CPU
  //   offload]). f32: allgather(mine -> full_values, count = shard, DType::kF32).
  //   16-bit param_dtype: half_shard = a new kCommunication tensor of `shard` elements of
  //   param_dtype holding round(mine) (nn::convert), half_full = a new kCommunication
  //   tensor of `padded` elements; allgather half_shard -> half_full as DType::kF16 / kBF16. Keep the Work in st.gather; set gather_issued; ++in_flight_ and
  //   raise current_.max_in_flight; count current_.allgathers and allgather_bytes (padded x
  //   the element size actually sent).
  throw dtl::NotImplemented("ShardedTrainer::issue_gather");
}

void ShardedTrainer::wait_gather(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // TODO(student): If unit u's gather has not been waited for yet (st.gather.completed() is false):
  //   wait_timed() it, --in_flight_; 16-bit: widen half_full into full_values
  //   (nn::convert) and drop both 16-bit tensors (assign nn::Tensor(): their storage is freed).
  throw dtl::NotImplemented("ShardedTrainer::wait_gather");
}

void ShardedTrainer::free_params(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // TODO(student): Release full_values' storage and clear gather_issued (the views stay bound; a read
  //   before the next gather throws).
  throw dtl::NotImplemented("ShardedTrainer::free_params");
}

void ShardedTrainer::gather_for_use(int u, int direction) {
  // TODO(student): Issue unit u's gather (issue_gather() does nothing if it was prefetched). Then
  //   prefetch: for i = 1 .. options_.prefetch, the unit v = u + i * direction (stop
  //   outside [0, unit_count())); skip one already issued; stop once 1 + prefetch units
  //   are gathered or in flight (the rate limiter). Finally wait_gather(u).
  throw dtl::NotImplemented("ShardedTrainer::gather_for_use");
}

}  // namespace dtl::lab06
