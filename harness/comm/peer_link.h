/// @file
/// @brief PeerLink: tagged, nonblocking point-to-point messages between ranks (a
/// pipeline's activations and gradients), over Open MPI for host buffers or over
/// NCCL for device buffers (harness/comm/nccl_peer_link.h). See Note [Tags and NCCL's order].
///
/// Every message is one isend() on one rank and one irecv() on its peer, with the
/// same tag, count and type. Both return a Work (harness/comm/communicator.h): the
/// buffer is the link's until the Work completed, and a Work destroyed first waits.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"

namespace dtl {

// Note [Tags and NCCL's order]
// ----------------------------
// MPI matches a receive with the send of the same source and tag, whatever the
// order the two ranks issued them in. NCCL has no tags: the k-th ncclRecv from a
// peer is paired with that peer's k-th ncclSend to us. Code written against tags
// runs on NCCL only if, for each ordered pair of ranks (a to b), a issues its sends
// to b in the same order (of tags) as b issues its receives from a. A pipeline's
// GPipe and 1F1B do: forwards run in micro-batch order on every stage, and so do
// backwards. A schedule that runs F1 before F0 on one stage only is right over MPI
// and silently wrong over NCCL (stage s + 1 would compute F0 on F1's activation);
// NcclPeerLink checks every message's tag on the host to make that an error, and
// dtl::testing::StreamModelPeerLink checks the orders where there is no GPU.

/// @brief Which side of a message.
enum class PeerOp { kSend, kRecv };

/// @brief One point-to-point operation, as PeerLink hands it to a backend.
struct PeerInfo {
  PeerOp op = PeerOp::kSend;  ///< send or receive
  int peer = 0;               ///< the other rank
  int tag = 0;                ///< the tag (>= 0)
  std::size_t count = 0;      ///< elements
  DType dtype = DType::kF32;  ///< their type
  std::string description;    ///< e.g. "send (tag 4 to rank 1, 512 x f32 = 2 KiB) on mpi, rank 0"
};

/// @brief Nonblocking, tagged point-to-point messages among the ranks of a group.
class PeerLink {
 public:
  /// @brief Destroys the backend (after its pending operations complete).
  virtual ~PeerLink() = default;
  /// @return this process's rank.
  virtual int rank() const = 0;
  /// @return the number of ranks.
  virtual int size() const = 0;
  /// @return the backend's name, e.g. "mpi" or "nccl".
  virtual std::string name() const = 0;

  /// @brief Starts sending `count` elements of `buf` to `peer` with `tag`.
  /// @param[in] buf the data; the link's until the Work completed (do not write or free it).
  /// @param[in] count elements (> 0). @param[in] dtype their type.
  /// @param[in] peer the receiving rank (not this one). @param[in] tag >= 0.
  /// @return the send.
  /// @throws InvalidArgument naming the argument and this rank for a bad peer, tag, count or buffer.
  Work isend(const void* buf, std::size_t count, DType dtype, int peer, int tag);
  /// @brief Starts receiving `count` elements from `peer`'s send with `tag` into `buf`.
  /// @param[out] buf where the data lands; read it only after the Work completed.
  /// @param[in] count elements (> 0). @param[in] dtype their type.
  /// @param[in] peer the sending rank (not this one). @param[in] tag >= 0.
  /// @return the receive.
  /// @throws InvalidArgument naming the argument and this rank for a bad peer, tag, count or buffer.
  Work irecv(void* buf, std::size_t count, DType dtype, int peer, int tag);

 protected:
  /// @brief Starts a checked, described send. @param[in] buf the data. @param[in] info the operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_isend(const void* buf, const PeerInfo& info) = 0;
  /// @brief Starts a checked, described receive. @param[out] buf where it lands. @param[in] info the operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_irecv(void* buf, const PeerInfo& info) = 0;
  /// @return how long a Work of this backend waits before a TimeoutError (0: forever).
  virtual double timeout() const { return 0.0; }

 private:
  PeerInfo describe(PeerOp op, const void* buf, std::size_t count, DType dtype, int peer, int tag) const;
};

/// @brief PeerLink over Open MPI (MPI_Isend, MPI_Irecv) on a duplicate of a communicator: host buffers.
///
/// A Work's wait() blocks in MPI_Wait, with no timeout of its own, so that a rank
/// waiting forever is seen by the test watchdog (harness/testing/mpi_tracer.h) in
/// MPI_Wait on its receive, with source and tag.
class MpiPeerLink final : public PeerLink {
 public:
  /// @brief Duplicates `comm` (collective over it): our messages match only each other.
  /// @param[in] comm the ranks.
  explicit MpiPeerLink(MPI_Comm comm);
  /// @return the rank in `comm`.
  int rank() const override { return rank_; }
  /// @return the size of `comm`.
  int size() const override { return size_; }
  /// @return "mpi".
  std::string name() const override { return "mpi"; }

 protected:
  /// @copydoc PeerLink::do_isend
  std::unique_ptr<WorkImpl> do_isend(const void* buf, const PeerInfo& info) override;
  /// @copydoc PeerLink::do_irecv
  std::unique_ptr<WorkImpl> do_irecv(void* buf, const PeerInfo& info) override;

 private:
  Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace dtl
