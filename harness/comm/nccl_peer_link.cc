// NcclPeerLink: ncclSend/ncclRecv on one channel per direction of each
// neighbouring pair. See Note [One channel per direction] in the header.
#include "harness/comm/nccl_peer_link.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <utility>

#include "harness/comm/nccl_check.h"
#include "harness/cuda/check.h"

namespace dtl {

/// One direction between two neighbours: its NCCL communicator of two ranks, the
/// stream of this end, and how many messages went through it (the tags' sequence).
struct NcclPeerLink::Channel {
  NcclComm comm;          ///< two ranks: the lower-numbered rank of the pair is 0
  cuda::Stream stream;    ///< this end's stream (made on the device after comm)
  int peer = -1;          ///< the other end's rank in the chain
  int peer_in_pair = 0;   ///< its rank in `comm`
  PeerOp op = PeerOp::kSend;  ///< what this end does on it
  long long messages = 0;     ///< issued so far
  std::atomic<bool> failed{false};  ///< an operation failed: abort, do not destroy
};

namespace {

constexpr auto kPollInterval = std::chrono::microseconds(20);
constexpr int kTagSequences = 32767;  // the smallest MPI_TAG_UB

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

// One send or receive: `ready` on the compute stream, `done` on the channel's
// stream, and the tag's MPI message. Complete when both are.
class P2pWork final : public WorkImpl {
 public:
  P2pWork(const PeerInfo& info, cuda::Event ready, cuda::Event done, cudaStream_t compute,
          std::shared_ptr<NcclPeerLink::Channel> channel, std::unique_ptr<int> tag_box, MPI_Request tag_request)
      : WorkImpl(info.description),
        info_(info),
        ready_(std::move(ready)),
        done_(std::move(done)),
        compute_(compute),
        channel_(std::move(channel)),
        tag_box_(std::move(tag_box)),
        tag_request_(tag_request) {}
  ~P2pWork() override {
    if (tag_request_ != MPI_REQUEST_NULL) MPI_Request_free(&tag_request_);  // after a failure only
  }

  bool test() override {
    if (complete_) return true;
    if (tag_request_ != MPI_REQUEST_NULL) {
      int arrived = 0;
      DTL_MPI_CHECK(MPI_Test(&tag_request_, &arrived, MPI_STATUS_IGNORE));
    }
    if (!landed_) {
      const cudaError_t rc = cudaEventQuery(done_.get());
      if (rc == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;
        DTL_NCCL_CHECK(ncclCommGetAsyncError(channel_->comm.get(), &async));
        if (async != ncclSuccess && async != ncclInProgress) {
          channel_->failed.store(true);
          detail::throw_nccl_error(static_cast<int>(async), ncclGetErrorString(async),
                                   "ncclCommGetAsyncError (the send or receive failed in flight)", __FILE__, __LINE__);
        }
        return false;
      }
      if (rc != cudaSuccess) channel_->failed.store(true);
      DTL_CUDA_CHECK(rc);
      landed_ = true;
      end_ = clock_seconds();
      // Kernels queued from now on run after the message: they read a landed
      // receive, and may overwrite or free a sent buffer (Note [One channel per
      // direction]). Done before any error below, so that freeing the buffer is safe.
      DTL_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_.get(), 0));
    }
    if (tag_request_ != MPI_REQUEST_NULL) return false;  // the data landed; its tag is still on the way
    complete_ = true;
    float ms = 0.0F;
    if (cudaEventElapsedTime(&ms, ready_.get(), done_.get()) == cudaSuccess) {
      set_start(std::max(issue_seconds(), end_ - static_cast<double>(ms) * 1e-3));
    }
    set_end(end_);
    if (info_.op == PeerOp::kRecv && *tag_box_ != info_.tag) {
      throw Error("NcclPeerLink: rank " + std::to_string(info_.peer) + " sent tag " + std::to_string(*tag_box_) +
                  " where this receive expected tag " + std::to_string(info_.tag) +
                  ": NCCL pairs messages by order, not by tag, so both ranks must issue their messages to each "
                  "other in the same order (Note [Tags and NCCL's order], harness/comm/peer_link.h)");
    }
    return true;
  }

  bool wait_until(double deadline_seconds) override {
    while (!test()) {
      if (clock_seconds() >= deadline_seconds) return false;
      std::this_thread::sleep_for(kPollInterval);
    }
    return true;
  }

 private:
  PeerInfo info_;
  cuda::Event ready_, done_;
  cudaStream_t compute_;
  std::shared_ptr<NcclPeerLink::Channel> channel_;
  std::unique_ptr<int> tag_box_;  // the tag sent, or the place the peer's tag lands
  MPI_Request tag_request_;
  bool landed_ = false;    // the host saw `done`: the compute stream waits for it
  bool complete_ = false;  // landed, and the tag arrived
  double end_ = 0.0;       // when the host saw `done`
};

GpuPlacement checked_placement(MPI_Comm chain) {
  GpuPlacement placement = gpu_placement(chain);
  if (!placement.nccl_ok) {
    throw Error("NcclPeerLink: NCCL cannot run here: " + placement.why_not +
                ". Run one rank per GPU (or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1), or use MpiPeerLink.");
  }
  return placement;
}

}  // namespace

NcclPeerLink::NcclPeerLink(MPI_Comm chain, cudaStream_t compute_stream)
    : placement_(checked_placement(chain)), tags_(chain), compute_(compute_stream) {
  const auto [rank, size] = rank_and_size(chain);
  rank_ = rank;
  size_ = size;
  if (const char* env = std::getenv("DTL_COMM_TIMEOUT"); env != nullptr && *env != '\0') timeout_ = std::atof(env);
  DTL_CUDA_CHECK(cudaSetDevice(placement_.device));
  // Two rounds of pairs, (0,1) (2,3) ... then (1,2) (3,4) ...: every rank is in at most one pair a round.
  MPI_Comm pairs[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
  int first_of_pair[2] = {-1, -1};
  for (int round = 0; round < 2; ++round) {
    const int a = (rank - round) % 2 == 0 ? rank : rank - 1;
    const bool in_pair = a >= round && a + 1 < size;
    first_of_pair[round] = in_pair ? a : -1;
    DTL_MPI_CHECK(MPI_Comm_split(chain, in_pair ? a : MPI_UNDEFINED, rank, &pairs[round]));
  }
  try {
    for (int round = 0; round < 2; ++round) {
      const int a = first_of_pair[round];
      if (a < 0) continue;
      // Both ends make the pair's two channels in the same order: a -> a+1, then a+1 -> a.
      for (int from : {a, a + 1}) {
        auto ch = std::make_shared<Channel>();
        ch->comm = NcclComm(pairs[round], placement_.device);
        ch->peer = rank == a ? a + 1 : a;
        ch->peer_in_pair = rank == a ? 1 : 0;
        ch->op = from == rank ? PeerOp::kSend : PeerOp::kRecv;
        channels_.push_back(std::move(ch));
      }
    }
  } catch (...) {
    for (MPI_Comm& c : pairs) {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
    throw;
  }
  for (MPI_Comm& c : pairs) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
}

NcclPeerLink::~NcclPeerLink() {
  cudaSetDevice(placement_.device);
  const double deadline = clock_seconds() + (timeout_ > 0 ? timeout_ : 1e300);
  for (auto& ch : channels_) {
    while (!ch->failed.load()) {
      const cudaError_t rc = cudaStreamQuery(ch->stream.get());
      if (rc == cudaSuccess) break;
      if (rc != cudaErrorNotReady || clock_seconds() >= deadline) {
        std::cerr << "[dtl] ~NcclPeerLink: a message to or from rank " << ch->peer << " is still in flight ["
                  << where_am_i() << "]; aborting its channel" << std::endl;
        ch->failed.store(true);
        break;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    if (ch->failed.load()) ch->comm.mark_failed();
  }
}

NcclPeerLink::Channel& NcclPeerLink::channel(PeerOp op, int peer, const PeerInfo& info) {
  for (auto& ch : channels_) {
    if (ch->peer == peer && ch->op == op) return *ch;
  }
  throw_invalid_argument(op == PeerOp::kSend ? "NcclPeerLink::isend" : "NcclPeerLink::irecv", "peer",
                         "is rank " + std::to_string(peer) + ", not a neighbour of rank " + std::to_string(rank_) +
                             ": NcclPeerLink connects rank r with r - 1 and r + 1 only (" + info.description + ")");
}

std::unique_ptr<WorkImpl> NcclPeerLink::launch(void* buf, const PeerInfo& info) {
  Channel& ch = channel(info.op, info.peer, info);
  std::shared_ptr<Channel> owner;
  for (auto& c : channels_) {
    if (c.get() == &ch) owner = c;
  }
  try {
    DTL_CUDA_CHECK(cudaSetDevice(placement_.device));
    // The tag, by sequence number on the host (Note [One channel per direction]).
    auto tag_box = std::make_unique<int>(info.tag);
    MPI_Request tag_request = MPI_REQUEST_NULL;
    const int sequence = static_cast<int>(ch.messages++ % kTagSequences);
    if (info.op == PeerOp::kSend) {
      DTL_MPI_CHECK(MPI_Isend(tag_box.get(), 1, MPI_INT, info.peer, sequence, tags_, &tag_request));
    } else {
      DTL_MPI_CHECK(MPI_Irecv(tag_box.get(), 1, MPI_INT, info.peer, sequence, tags_, &tag_request));
    }
    cuda::Event ready, done;
    ready.record(compute_);  // after the kernels that wrote what is sent, or last read what is received into
    DTL_CUDA_CHECK(cudaStreamWaitEvent(ch.stream.get(), ready.get(), 0));
    if (info.op == PeerOp::kSend) {
      DTL_NCCL_CHECK(ncclSend(buf, info.count, nccl_type(info.dtype), ch.peer_in_pair, ch.comm.get(), ch.stream.get()));
    } else {
      DTL_NCCL_CHECK(ncclRecv(buf, info.count, nccl_type(info.dtype), ch.peer_in_pair, ch.comm.get(), ch.stream.get()));
    }
    done.record(ch.stream.get());
    return std::make_unique<P2pWork>(info, std::move(ready), std::move(done), compute_, owner, std::move(tag_box),
                                     tag_request);
  } catch (const NcclError&) {
    ch.failed.store(true);
    rethrow_with_context(std::current_exception(), info.description);
  } catch (...) {
    rethrow_with_context(std::current_exception(), info.description);
  }
}

// do_isend: ncclSend on the channel to info.peer, after the compute stream's work so far.
std::unique_ptr<WorkImpl> NcclPeerLink::do_isend(const void* buf, const PeerInfo& info) {
  return launch(const_cast<void*>(buf), info);  // NOLINT: ncclSend only reads it
}

// do_irecv: ncclRecv on the channel from info.peer, after the compute stream's work so far.
std::unique_ptr<WorkImpl> NcclPeerLink::do_irecv(void* buf, const PeerInfo& info) { return launch(buf, info); }

}  // namespace dtl
