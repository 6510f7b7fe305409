/// @file
/// @brief Lab 06, task F: hybrid sharding (PyTorch FSDP's HYBRID_SHARD; the
/// grouping of ZeRO++'s hpZ) — shard inside a group of G ranks, replicate across
/// the P / G groups.
///
/// What this header holds: Note [Hybrid sharding]; the group arithmetic
/// (make_hybrid_groups()); and HybridCommunicator, a Communicator of G ranks
/// whose reduce-scatter is two-level. The trainer of tasks B and C is not
/// changed at all: given a HybridCommunicator as its backend it shards G ways,
/// and every gradient it reduce-scatters is also averaged across the groups.
/// Given (labs/06_fsdp/given/two_stage_lanes.cc, compiled into both builds, not
/// yours to edit): TwoStageLanes, the two threads that run the stages in order.
/// The rest of the lab is in lab06/fsdp.h.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"

namespace dtl::lab06 {

// Note [Hybrid sharding]
// ~~~~~~~~~~~~~~~~~~~~~~
// FSDP over all P ranks makes every all-gather and every reduce-scatter a
// collective of all P ranks. On a cluster of nodes (fast NVLink inside a node,
// a slower network between nodes) each of those crosses the slow network:
// three passes over the model's bytes per step. Hybrid sharding cuts the P
// ranks into P / G = R groups of G consecutive ranks (a group is usually a node)
// and runs FSDP inside each group; the R groups are replicas of each other,
// as in DDP. World rank r is rank r % G of group r / G:
//
//     P = 6, G = 3        group 0: ranks 0 1 2      group 1: ranks 3 4 5
//     shard j of a unit   held by ranks j and 3 + j (a replica set of R = 2)
//
// What each collective of the trainer becomes:
//
//     all-gather       inside the group only: the group holds the whole unit
//     reduce-scatter   inside the group, then an allreduce of the shard across
//                      the R ranks that hold the same shard (same op)
//     allreduce        inside the group, then across (fp16's found-inf flag)
//     broadcast(root)  from world rank `root`: across to the ranks holding the
//                      same shard position, then inside each group
//
// Per rank and step, with N_G the model's padded size at W = G (Note [ZeRO
// stages] with W = G), memory is FSDP's at W = G — 4N_G / G + 4L of
// parameters, as many of gradients, 8N_G / G of AdamW state — and only the
// shard's allreduce crosses groups: 4N_G / G bytes of buffer, where FSDP over P
// sends its reduce-scatter and both all-gathers (12 N_P) across. The two ends:
// G = P is FSDP (one group, nothing crosses: no operation is issued across);
// G = 1 is DDP (every rank holds the whole model, and the cross-group allreduce
// of the whole gradient is DDP's). ZeRO++'s hpZ keeps the optimizer state
// sharded over all P and only a second copy of the parameters inside the group;
// that is not this task (the handout, section "Hybrid sharding", compares them).

// ---------------------------------------------------------------------------
// Given: two lanes of stages (two_stage_lanes.cc)
// ---------------------------------------------------------------------------

/// @brief Runs two-stage operations on two threads, each stage in issue order:
/// stage one of every operation on the "inside" lane, then (if there is one) its
/// stage two on the "across" lane.
///
/// Stage one of operation k + 1 runs while stage two of operation k does, so a
/// slow cross-group allreduce never holds up the next in-group gather. Each lane
/// is one thread that runs its calls one at a time (a CommThread), so the
/// communicator a lane uses sees its operations issued, and waited for, from that
/// one thread in the same order on every rank.
class TwoStageLanes {
 public:
  /// @brief Starts both threads.
  /// @param[in] name what the lanes serve, for messages.
  explicit TwoStageLanes(const std::string& name);
  /// @brief Runs what is queued on both lanes, then joins them.
  ~TwoStageLanes();
  TwoStageLanes(const TwoStageLanes&) = delete;
  TwoStageLanes& operator=(const TwoStageLanes&) = delete;

  /// @brief Queues `inside` behind every earlier stage one and, once it returned,
  /// `across` behind every earlier stage two.
  ///
  /// Each stage is a blocking call (issue an operation on a communicator and wait
  /// for it). An exception a stage throws completes the operation with that error
  /// (and skips its stage two); it is rethrown by the Work's wait().
  /// @param[in] description what the operation is, for messages.
  /// @param[in] inside stage one (not empty).
  /// @param[in] across stage two, or empty for none.
  /// @return the operation, complete when its last stage has returned.
  std::unique_ptr<WorkImpl> submit(const std::string& description, std::function<void()> inside,
                                   std::function<void()> across);

 private:
  CommThread across_;  // made first, so destroyed after inside_, whose stages may still submit to it
  CommThread inside_;
};

// ---------------------------------------------------------------------------
// Task F: hybrid sharding (hybrid_shard.cc)
// ---------------------------------------------------------------------------

/// @brief Where one rank sits in a hybrid sharding of P ranks into groups of G (Note [Hybrid sharding]).
struct HybridGroups {
  int world_size = 1;  ///< P
  int group_size = 1;  ///< G: ranks in a shard group
  int replicas = 1;    ///< R = P / G: groups, and ranks holding each shard
  int rank = 0;        ///< this rank in the world
  int group = 0;       ///< which shard group this rank is in, in [0, R)
  int group_rank = 0;  ///< this rank's place in its group, in [0, G): the shard it holds
  std::vector<int> group_members;    ///< the world ranks of this rank's group, in group-rank order
  std::vector<int> replica_members;  ///< the world ranks holding the same shard, in group order
};

/// @brief Where `rank` sits when P = world_size ranks are cut into groups of G = group_size consecutive ranks.
///
/// Example: P = 6, G = 3, rank 4: group 1, group_rank 1, replicas 2, group
/// members {3, 4, 5}, replica members {1, 4}.
/// @param[in] world_size P >= 1.
/// @param[in] rank in [0, P).
/// @param[in] group_size G >= 1, a divisor of P.
/// @return the groups of `rank`.
/// @throws dtl::InvalidArgument naming the argument and the rank: a world_size < 1, a rank out
///         of range, a group_size < 1, or one that does not divide the world size (the message
///         gives both numbers).
HybridGroups make_hybrid_groups(int world_size, int rank, int group_size);

/// @brief A Communicator of the G ranks of one shard group whose reductions also
/// run across the groups (Note [Hybrid sharding]): the backend a ShardedTrainer
/// takes to shard G ways and replicate R ways.
///
/// rank() and world_size() are the group's (group_rank and G). Each operation is
/// one or two operations on the two communicators given, issued in the order the
/// trainer issues them on every rank:
///   - allgather: on `shard_group` only; nothing crosses groups;
///   - reduce_scatter: on `shard_group` into recv_buf, then an in-place allreduce
///     of recv_buf (recv_count elements, the same op) on `replica_group`;
///   - allreduce: on `shard_group`, then on `replica_group` (the same op);
///   - broadcast(root): world rank `root` (group 0's rank `root`) to every rank: on
///     `shard_group` from `root`, then on `replica_group` from group 0.
/// With one group (R = 1) nothing is issued on `replica_group`. kAvg over the
/// two stages is the average over all P ranks (every group has G ranks). The
/// stages run on TwoStageLanes: every operation on `shard_group` is issued and
/// waited for on the inside lane, every one on `replica_group` on the across
/// lane, and the Work returned completes when the operation's last stage has.
class HybridCommunicator final : public Communicator {
 public:
  /// @brief The hybrid communicator of one rank.
  ///
  /// Collective in the sense of the interface: every rank of the world makes one,
  /// with its own groups.
  /// @param[in] shard_group the G ranks of this rank's group (groups.group_members), in
  ///            group-rank order; must outlive this.
  /// @param[in] replica_group the R ranks holding this rank's shard (groups.replica_members),
  ///            in group order; must outlive this.
  /// @param[in] groups this rank's place (make_hybrid_groups()).
  /// @throws dtl::InvalidArgument naming the argument and the rank if a communicator's size or
  ///         rank is not the one `groups` gives it.
  HybridCommunicator(Communicator& shard_group, Communicator& replica_group, HybridGroups groups);
  /// @brief Runs every stage still queued, then stops the lanes.
  ~HybridCommunicator() override = default;

  /// @return the rank in the group, groups().group_rank.
  int rank() const override { return groups_.group_rank; }
  /// @return G, the group's size.
  int world_size() const override { return groups_.group_size; }
  /// @return e.g. "hybrid G=2 x R=3 (shard: mpi-thread; replicas: mpi-thread)".
  std::string name() const override;
  /// @return this rank's groups.
  const HybridGroups& groups() const noexcept { return groups_; }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what each does here: this class's comment

 private:
  Communicator& shard_;
  Communicator& replica_;
  HybridGroups groups_;
  TwoStageLanes lanes_;  // declared last: destroyed first, so the stages still queued finish while both groups exist
};

}  // namespace dtl::lab06
