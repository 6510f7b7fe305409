// What the tests of task F (hybrid sharding) share: the groups and the two MPI
// communicators of a hybrid sharding, made here with the test's own arithmetic
// (world rank r is rank r % G of group r / G: Note [Hybrid sharding]), not with
// make_hybrid_groups(); a recording communicator on each level, so that what
// crosses groups is counted at the interface; and the closed forms of the
// Note's traffic as functions of G.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"
#include "lab06/hybrid.h"

namespace lab06_test {

/// The group sizes G that divide P, smallest first (G = 1 is DDP, G = P is FSDP).
inline std::vector<int> divisors(int world_size) {
  std::vector<int> out;
  for (int g = 1; g <= world_size; ++g)
    if (world_size % g == 0) out.push_back(g);
  return out;
}

/// The groups of `rank`, worked out here.
inline lab06::HybridGroups groups_of(int world_size, int rank, int group_size) {
  lab06::HybridGroups g;
  g.world_size = world_size;
  g.group_size = group_size;
  g.replicas = world_size / group_size;
  g.rank = rank;
  g.group = rank / group_size;
  g.group_rank = rank % group_size;
  for (int j = 0; j < group_size; ++j) g.group_members.push_back(g.group * group_size + j);
  for (int k = 0; k < g.replicas; ++k) g.replica_members.push_back(k * group_size + g.group_rank);
  return g;
}

/// One rank's hybrid sharding of comm() in groups of G: the MPI communicators of
/// its group and of its replica set, Open MPI backends on each, a recording wrapper
/// on each (inside and across), and the HybridCommunicator over the two wrappers.
/// Made collectively over comm(); members are destroyed in reverse order, the
/// HybridCommunicator (and its lanes) first.
struct HybridSetup {
  lab06::HybridGroups groups;
  dtl::Comm group_mpi, replica_mpi;
  std::unique_ptr<dtl::Communicator> group_backend, replica_backend;
  std::unique_ptr<RecordingCommunicator> inside, across;
  std::unique_ptr<lab06::HybridCommunicator> hybrid;

  explicit HybridSetup(int group_size) : groups(groups_of(comm().size(), comm().rank(), group_size)) {
    group_mpi = dtl::Comm::split(comm(), groups.group, groups.group_rank);
    replica_mpi = dtl::Comm::split(comm(), groups.group_rank, groups.group);
    group_backend = mpi_backend(group_mpi);
    replica_backend = mpi_backend(replica_mpi);
    inside = std::make_unique<RecordingCommunicator>(*group_backend);
    across = std::make_unique<RecordingCommunicator>(*replica_backend);
    hybrid = std::make_unique<lab06::HybridCommunicator>(*inside, *across, groups);
  }
};

/// Bytes a rank sends on the wire for an operation of `bytes` (OpInfo::total_bytes())
/// over n ranks with the ring algorithms (nccl-tests' bus factors): 2(n-1)/n for an
/// allreduce, (n-1)/n for a reduce-scatter or an all-gather.
inline double ring_wire_bytes(dtl::CollectiveKind kind, std::size_t bytes, int n) {
  const double f = n <= 1 ? 0.0 : static_cast<double>(n - 1) / n;
  return static_cast<double>(bytes) * (kind == dtl::CollectiveKind::kAllreduce ? 2.0 * f : f);
}

/// The wire bytes of every operation `recording` saw (a communicator of n ranks).
inline double wire_bytes(const RecordingCommunicator& recording, int n) {
  double sum = 0.0;
  for (const auto& op : recording.ops()) sum += ring_wire_bytes(op.kind, op.bytes, n);
  return sum;
}

}  // namespace lab06_test
