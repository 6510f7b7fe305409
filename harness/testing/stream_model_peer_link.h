/// @file
/// @brief StreamModelPeerLink: NcclPeerLink's streams and events played on the host,
/// so that CI (no GPU) checks what a GPU run needs of code that sends and receives
/// through a dtl::PeerLink (lab 07's pipeline stage).
///
/// It forwards every send and receive to a real link (MpiPeerLink: the results are
/// real) and records them in a StreamModelCommunicator's program-ordered list, the
/// model of the compute stream (harness/testing/stream_model_communicator.h): a
/// receive writes its buffer from its issue ("ready") until its Work is seen
/// complete ("done"), a send reads its buffer in that time. The code under test, or
/// the test, logs what its kernels read and write (compute_reads(), compute_writes()
/// on the log); the log's check() then finds a receive's buffer read before its wait
/// (on a GPU: data not yet landed) and a send's buffer written while in flight (on a
/// GPU: NCCL may send the new bytes). order_mismatch() finds the other GPU-only
/// fault: two ranks that issue their messages to each other in different orders,
/// which tags forgive and NCCL does not (Note [Tags and NCCL's order] in
/// harness/comm/peer_link.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/comm/peer_link.h"
#include "harness/testing/stream_model_communicator.h"

namespace dtl::testing {

/// @brief Forwards to an inner PeerLink, recording each operation in `log`.
class StreamModelPeerLink final : public dtl::PeerLink {
 public:
  /// @brief Records the operations issued on `inner`; both must outlive this.
  /// @param[in] inner the link that does the work. @param[in,out] log the compute stream's list.
  StreamModelPeerLink(dtl::PeerLink& inner, StreamModelCommunicator& log) : inner_(inner), log_(log) {}
  /// @return the inner link's rank.
  int rank() const override { return inner_.rank(); }
  /// @return the inner link's size.
  int size() const override { return inner_.size(); }
  /// @return "stream model over " and the inner link's name.
  std::string name() const override { return "stream model over " + inner_.name(); }

  /// @brief The buffer of the latest receive from `peer` with `tag` (null if none).
  /// @param[in] peer the sender. @param[in] tag the tag. @param[out] bytes its size.
  /// @return the buffer.
  const void* recv_buffer(int peer, int tag, std::size_t* bytes) const {
    const auto it = recv_buffers_.find({peer, tag});
    if (it == recv_buffers_.end()) return nullptr;
    *bytes = it->second.second;
    return it->second.first;
  }
  /// @brief Forgets the tags' orders (as the log's clear() forgets its entries).
  void clear() {
    sent_.clear();
    received_.clear();
  }

  /// @brief Whether, for every pair of ranks, the tags one sent to the other came in the
  /// order the other posted its receives: what NCCL, which pairs by order, needs.
  /// Collective over `comm`, whose ranks are the link's.
  /// @param[in] comm the link's ranks.
  /// @return "" if they agree everywhere; else the first disagreement seen by this rank.
  std::string order_mismatch(MPI_Comm comm) const {
    const int p = size();
    std::vector<int> send_counts(static_cast<std::size_t>(p)), recv_counts(static_cast<std::size_t>(p));
    std::vector<int> flat, send_displs(static_cast<std::size_t>(p)), recv_displs(static_cast<std::size_t>(p));
    for (int q = 0; q < p; ++q) {
      const auto it = sent_.find(q);
      send_displs[static_cast<std::size_t>(q)] = static_cast<int>(flat.size());
      if (it != sent_.end()) flat.insert(flat.end(), it->second.begin(), it->second.end());
      send_counts[static_cast<std::size_t>(q)] = static_cast<int>(flat.size()) - send_displs[static_cast<std::size_t>(q)];
    }
    DTL_MPI_CHECK(MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm));
    int total = 0;
    for (int q = 0; q < p; ++q) {
      recv_displs[static_cast<std::size_t>(q)] = total;
      total += recv_counts[static_cast<std::size_t>(q)];
    }
    std::vector<int> theirs(static_cast<std::size_t>(total));
    DTL_MPI_CHECK(MPI_Alltoallv(flat.data(), send_counts.data(), send_displs.data(), MPI_INT, theirs.data(),
                                recv_counts.data(), recv_displs.data(), MPI_INT, comm));
    for (int q = 0; q < p; ++q) {
      const auto begin = theirs.begin() + recv_displs[static_cast<std::size_t>(q)];
      const std::vector<int> sent(begin, begin + recv_counts[static_cast<std::size_t>(q)]);
      const auto it = received_.find(q);
      const std::vector<int> posted = it == received_.end() ? std::vector<int>{} : it->second;
      if (sent != posted) {
        return "rank " + std::to_string(q) + " sent tags " + join(sent) + " to rank " + std::to_string(rank()) +
               ", which posted its receives from it with tags " + join(posted) +
               ": NCCL pairs them by order, so on a GPU a receive would get another message's data";
      }
    }
    return "";
  }

 protected:
  std::unique_ptr<dtl::WorkImpl> do_isend(const void* buf, const dtl::PeerInfo& info) override {
    sent_[info.peer].push_back(info.tag);
    const std::size_t bytes = info.count * dtl::dtype_size(info.dtype);
    return log_.track(inner_.isend(buf, info.count, info.dtype, info.peer, info.tag), info.description, nullptr, 0,
                      buf, bytes);
  }
  std::unique_ptr<dtl::WorkImpl> do_irecv(void* buf, const dtl::PeerInfo& info) override {
    received_[info.peer].push_back(info.tag);
    const std::size_t bytes = info.count * dtl::dtype_size(info.dtype);
    recv_buffers_[{info.peer, info.tag}] = {buf, bytes};
    return log_.track(inner_.irecv(buf, info.count, info.dtype, info.peer, info.tag), info.description, buf, bytes,
                      nullptr, 0);
  }

 private:
  static std::string join(const std::vector<int>& tags) {
    std::string out = "[";
    for (std::size_t k = 0; k < tags.size(); ++k) out += (k ? " " : "") + std::to_string(tags[k]);
    return out + "]";
  }

  dtl::PeerLink& inner_;
  StreamModelCommunicator& log_;
  std::map<int, std::vector<int>> sent_, received_;  // per peer: tags in issue order
  std::map<std::pair<int, int>, std::pair<const void*, std::size_t>> recv_buffers_;
};

}  // namespace dtl::testing
