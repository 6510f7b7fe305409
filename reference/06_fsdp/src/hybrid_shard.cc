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
  // BEGIN SOLUTION(make_hybrid_groups)
  // | Check the arguments (errors name the argument and the rank; see the header), then
  // | fill every field of HybridGroups for `rank` (Note [Hybrid sharding]: groups of
  // | group_size consecutive ranks; handout Task F, Hint 1).
  const std::string who = " (rank " + std::to_string(rank) + ")";
  DTL_REQUIRE_ARG(world_size >= 1, "make_hybrid_groups", "world_size",
                  "is " + std::to_string(world_size) + "; it must be >= 1" + who);
  DTL_REQUIRE_ARG(rank >= 0 && rank < world_size, "make_hybrid_groups", "rank",
                  "is " + std::to_string(rank) + "; it must be in [0, " + std::to_string(world_size) + ")");
  DTL_REQUIRE_ARG(group_size >= 1, "make_hybrid_groups", "group_size",
                  "is " + std::to_string(group_size) + "; it must be >= 1" + who);
  DTL_REQUIRE_ARG(world_size % group_size == 0, "make_hybrid_groups", "group_size",
                  "is " + std::to_string(group_size) + ", which does not divide world_size " +
                      std::to_string(world_size) + " (groups must be equal)" + who);
  g.world_size = world_size;
  g.group_size = group_size;
  g.replicas = world_size / group_size;
  g.rank = rank;
  g.group = rank / group_size;
  g.group_rank = rank % group_size;
  for (int j = 0; j < group_size; ++j) g.group_members.push_back(g.group * group_size + j);
  for (int k = 0; k < g.replicas; ++k) g.replica_members.push_back(k * group_size + g.group_rank);
  // END SOLUTION
  return g;
}

HybridCommunicator::HybridCommunicator(Communicator& shard_group, Communicator& replica_group, HybridGroups groups)
    : shard_(shard_group), replica_(replica_group), groups_(std::move(groups)), lanes_("hybrid") {
  // BEGIN SOLUTION(HybridCommunicator::HybridCommunicator)
  // | Refuse communicators that do not match `groups` (sizes and ranks), naming the
  // | argument and the world rank.
  const std::string who = " (rank " + std::to_string(groups_.rank) + ")";
  DTL_REQUIRE_ARG(shard_.world_size() == groups_.group_size && shard_.rank() == groups_.group_rank,
                  "HybridCommunicator", "shard_group",
                  "is rank " + std::to_string(shard_.rank()) + " of " + std::to_string(shard_.world_size()) +
                      "; groups say rank " + std::to_string(groups_.group_rank) + " of " +
                      std::to_string(groups_.group_size) + who);
  DTL_REQUIRE_ARG(replica_.world_size() == groups_.replicas && replica_.rank() == groups_.group,
                  "HybridCommunicator", "replica_group",
                  "is rank " + std::to_string(replica_.rank()) + " of " + std::to_string(replica_.world_size()) +
                      "; groups say rank " + std::to_string(groups_.group) + " of " +
                      std::to_string(groups_.replicas) + who);
  // END SOLUTION
}

// Each do_* hands TwoStageLanes its stages as blocking calls: issue on one of the
// two communicators, wait. `info` holds the checked count, type, op and root.

std::unique_ptr<WorkImpl> HybridCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  // BEGIN SOLUTION(HybridCommunicator::do_allreduce)
  // | Every rank ends with the reduction over all P ranks (the header's class comment);
  // | nothing on replica_group when there is one group.
  const bool across = groups_.replicas > 1;
  return lanes_.submit(
      info.description, [this, buf, info] { shard_.allreduce(buf, info.count, info.dtype, info.op).wait(); },
      across ? std::function<void()>([this, buf, info] { replica_.allreduce(buf, info.count, info.dtype, info.op).wait(); })
             : std::function<void()>());
  // END SOLUTION
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  // BEGIN SOLUTION(HybridCommunicator::do_broadcast)
  // | Every rank ends with world rank `root`'s buffer (the header's class comment).
  // The inside stage gives every group its own rank `root`'s buffer; the across
  // stage then gives every replica set group 0's, which is now world rank root's.
  const bool across = groups_.replicas > 1;
  return lanes_.submit(
      info.description, [this, buf, info] { shard_.broadcast(buf, info.count, info.dtype, info.root).wait(); },
      across ? std::function<void()>([this, buf, info] { replica_.broadcast(buf, info.count, info.dtype, 0).wait(); })
             : std::function<void()>());
  // END SOLUTION
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                const OpInfo& info) {
  // BEGIN SOLUTION(HybridCommunicator::do_reduce_scatter)
  // | recv_buf ends with block rank() of send_buf reduced over all P ranks; only
  // | recv_count elements cross groups (the header's class comment; handout Task F, Hint 2).
  // Inside: the group's reduction of our block (kAvg: the group's mean). Across:
  // the R groups' results for the same block (kAvg: the mean of R means of G ranks
  // each, which is the mean over P). Only the shard crosses: 1/G of the unit.
  const bool across = groups_.replicas > 1;
  return lanes_.submit(
      info.description,
      [this, send_buf, recv_buf, info] {
        shard_.reduce_scatter(send_buf, recv_buf, info.count, info.dtype, info.op).wait();
      },
      across ? std::function<void()>([this, recv_buf, info] {
        replica_.allreduce(recv_buf, info.count, info.dtype, info.op).wait();
      })
             : std::function<void()>());
  // END SOLUTION
}

std::unique_ptr<WorkImpl> HybridCommunicator::do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) {
  // BEGIN SOLUTION(HybridCommunicator::do_allgather)
  // | recv_buf ends with the G blocks of this rank's group; nothing crosses groups.
  // Every group holds the whole unit: its G shards are all there is.
  return lanes_.submit(
      info.description,
      [this, send_buf, recv_buf, info] { shard_.allgather(send_buf, recv_buf, info.count, info.dtype).wait(); },
      std::function<void()>());
  // END SOLUTION
}

}  // namespace dtl::lab06
