/// @file
/// @brief NcclPeerLink: PeerLink over NCCL's ncclSend/ncclRecv between neighbouring
/// ranks of a chain (a pipeline), device buffers, one NCCL communicator and one
/// stream per direction of each pair. See Note [One channel per direction].
///
/// Built into dtl::cuda only where NCCL is found (DTL_HAVE_NCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/comm/nccl_comm.h"
#include "harness/comm/peer_link.h"
#include "harness/cuda/stream.h"

namespace dtl {

// Note [One channel per direction]
// --------------------------------
// An ncclSend on a stream holds that stream until the peer's matching ncclRecv
// runs, and operations of one NCCL communicator run one after another whatever
// stream they were issued on. A pipeline stage posts its receives early (the next
// activation from s - 1, the next gradient from s + 1) and sends as soon as a
// micro-batch is computed. On one communicator, a receive of B0's gradient posted
// early would sit in front of F0's activation send that stage s + 1 needs before
// it can ever produce that gradient: a deadlock MPI never has, since its
// nonblocking operations do not queue behind one another.
//
// So each direction of each neighbouring pair gets a channel of its own: a
// two-rank NCCL communicator and a stream on each end.
//
//     stage s-1 ==activations==> stage s ==activations==> stage s+1
//     stage s-1 <==gradients==== stage s <==gradients==== stage s+1
//
// On a channel one rank only sends and the other only receives, both in the
// order of Note [Tags and NCCL's order], so a blocked operation holds back only
// later messages of the same kind between the same two stages, as a FIFO of tagged
// MPI messages would. Each operation is ordered after the compute stream's work
// queued before it (an event `ready`, as in Note [Why a side stream]), and once its
// Work completed the compute stream waits for its `done`: a kernel queued after a
// receive's wait reads the landed data; a buffer whose send was waited for may be
// reused. Each message also carries its tag on the host (one int over MPI, by
// sequence number), and a receive whose peer sent another tag throws.

/// @brief PeerLink over NCCL between rank r and its neighbours r - 1 and r + 1 only.
class NcclPeerLink final : public PeerLink {
 public:
  /// @brief Creates the channels (collective over `chain`): gpu_placement() picks
  /// the device, MPI_Comm_split makes the neighbouring pairs, NcclComm each channel.
  /// @param[in] chain the ranks, in chain order (a pipeline: rank s = stage s).
  /// @param[in] compute_stream the stream the caller computes on (not owned; this rank's device).
  /// @throws Error on every rank, with gpu_placement()'s reason, when NCCL cannot run here.
  /// @throws MpiError, CudaError or NcclError if making a channel fails.
  NcclPeerLink(MPI_Comm chain, cudaStream_t compute_stream);
  /// @brief Waits (up to the timeout) for every channel's stream, then destroys the
  /// channels, aborting those whose operations failed or did not finish; never throws.
  ~NcclPeerLink() override;
  NcclPeerLink(const NcclPeerLink&) = delete;
  NcclPeerLink& operator=(const NcclPeerLink&) = delete;

  /// @return the rank in the chain.
  int rank() const override { return rank_; }
  /// @return the ranks in the chain.
  int size() const override { return size_; }
  /// @return "nccl".
  std::string name() const override { return "nccl"; }
  /// @return the device the buffers must be on.
  int device() const noexcept { return placement_.device; }

  /// @brief One direction between two neighbours (Note [One channel per direction]).
  struct Channel;

 protected:
  /// @copydoc PeerLink::do_isend
  std::unique_ptr<WorkImpl> do_isend(const void* buf, const PeerInfo& info) override;
  /// @copydoc PeerLink::do_irecv
  std::unique_ptr<WorkImpl> do_irecv(void* buf, const PeerInfo& info) override;
  /// @return DTL_COMM_TIMEOUT, else 120 s.
  double timeout() const override { return timeout_; }

 private:
  Channel& channel(PeerOp op, int peer, const PeerInfo& info);
  std::unique_ptr<WorkImpl> launch(void* buf, const PeerInfo& info);

  GpuPlacement placement_;
  int rank_ = 0, size_ = 1;
  double timeout_ = 120.0;
  Comm tags_;                                      // the tags' MPI messages
  std::vector<std::shared_ptr<Channel>> channels_;  // to/from r - 1 and r + 1, each direction
  cudaStream_t compute_;
};

}  // namespace dtl
