// Lab 06, task F: hybrid sharding — FSDP inside groups of G ranks, DDP across
// the P / G groups (Note [Hybrid sharding] in lab06/hybrid.h).
//
// What this file teaches: hybrid sharding is a communicator, not a new trainer.
// The ShardedTrainer of tasks B and C shards over whatever backend it is given;
// give it the G ranks of one group and it shards G ways. The one thing it must
// not miss is the other groups' gradients: so this communicator's reduce-scatter
// goes on across the groups, on the shard only, and its gathers never leave the
// group. How that reaches the closed forms of the Note is handout Task F.
#include <string>
#include <utility>

#include "harness/error.h"
#include "lab06/hybrid.h"

namespace dtl::lab06 {

HybridGroups make_hybrid_groups(int world_size, int rank, int group_size) {
  HybridGroups g;
  // TODO(student): Check the arguments (errors name the argument and the rank; see the header), then
  //   fill every field of HybridGroups for `rank` (Note [Hybrid sharding]: groups of
  //   group_size consecutive ranks; handout Task F, Hint 1).
  throw dtl::NotImplemented("make_hybrid_groups");
  return g;
}

HybridCommunicator::HybridCommunicator(Communicator& shard_group, Communicator& replica_group, HybridGroups groups)
    : shard_(shard_group), replica_(replica_group), groups_(std::move(groups)), lanes_("hybrid") {
  // TODO(student): Refuse communicators that do not match `groups` (sizes and ranks), naming the
  //   argument and the world rank.
  throw dtl::NotImplemented("HybridCommunicator::HybridCommunicator");
}

// Each do_* hands TwoStageLanes its stages as blocking calls: issue on one of the
// two communicators, wait. `info` holds the checked count, type, op and root.

std::unique_ptr<WorkImpl> HybridCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  // TODO(student): Every rank ends with the reduction over all P ranks (the header's class comment);
  //   nothing on replica_group when there is one group.
  throw dtl::NotImplemented("HybridCommunicator::do_allreduce");
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  // TODO(student): Every rank ends with world rank `root`'s buffer (the header's class comment).
  throw dtl::NotImplemented("HybridCommunicator::do_broadcast");
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                const OpInfo& info) {
  // TODO(student): recv_buf ends with block rank() of send_buf reduced over all P ranks; only
  //   recv_count elements cross groups (the header's class comment; handout Task F, Hint 2).
  throw dtl::NotImplemented("HybridCommunicator::do_reduce_scatter");
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) {
  // TODO(student): recv_buf ends with the G blocks of this rank's group; nothing crosses groups.
  throw dtl::NotImplemented("HybridCommunicator::do_allgather");
}

}  // namespace dtl::lab06
