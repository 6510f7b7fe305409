// Lab 06, task E: CPU offload — the two copies that let the shards and the
// optimizer state live in host memory (Note [CPU offload] in lab06/fsdp.h).
//
// What this file teaches: offload is a placement plus two copies per use.
// The shard, the gradient shard and the optimizer state are made on
// state_device() (task B's constructor); the optimizer steps them where they
// are. The invariant: no collective touches host memory, so everything a
// collective reads or writes stays on the compute device, and each copy runs
// between the collective that needs it and the memory's release. Where tasks B
// and C call the two copies is handout Task E.
//
// Per unit and use, 4 * shard bytes cross the link each way that applies; the
// trainer counts them in StepResult (8S host to device, 4S back per step).
#include <cstdint>

#include "lab06/fsdp.h"

namespace dtl::lab06 {

void ShardedTrainer::upload_shard(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::upload_shard)
  // | With full_values allocated, put this rank's host shard into its own slice of
  // | full_values and count the bytes copied in current_.host_to_device_bytes (Note [CPU
  // | offload], handout Task E).
  // The two copies in the step (callers in fsdp_gather.cc and sharded_trainer.cc):
  //
  //     issue_gather(u)   allocate full_values; upload_shard(u): host shard ->
  //                       own slice; all-gather in place (send = own slice)
  //     wait_reduce(u)    the reduce-scatter wrote the averaged shard into the
  //                       own slice of full_grads; download_grad_shard(u):
  //                       own slice -> host grad_shard; free full_grads
  st.full_values.view(st.layout.shard_begin(backend_.rank()), {st.layout.shard}).copy_from(st.shard);
  current_.host_to_device_bytes += st.layout.shard * 4;
  // END SOLUTION
}

void ShardedTrainer::download_grad_shard(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::download_grad_shard)
  // | After the in-place reduce-scatter, copy this rank's averaged gradient slice of
  // | full_grads into the host grad_shard and count the bytes in
  // | current_.device_to_host_bytes (Note [CPU offload], handout Task E).
  st.grad_shard.copy_from(st.full_grads.view(st.layout.shard_begin(backend_.rank()), {st.layout.shard}));
  current_.device_to_host_bytes += st.layout.shard * 4;
  // END SOLUTION
}

}  // namespace dtl::lab06
