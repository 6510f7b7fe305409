// PeerLink's argument checks and descriptions, and its Open MPI backend.
#include "harness/comm/peer_link.h"

#include <climits>
#include <sstream>
#include <utility>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"

namespace dtl {

PeerInfo PeerLink::describe(PeerOp op, const void* buf, std::size_t count, DType dtype, int peer, int tag) const {
  const char* function = op == PeerOp::kSend ? "PeerLink::isend" : "PeerLink::irecv";
  const std::string on = " (on rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
  DTL_REQUIRE_ARG(peer >= 0 && peer < size() && peer != rank(), function, "peer",
                  "is " + std::to_string(peer) + "; it must be another rank in [0, " + std::to_string(size()) + ")" +
                      on);
  DTL_REQUIRE_ARG(tag >= 0, function, "tag", "is " + std::to_string(tag) + "; tags are >= 0" + on);
  DTL_REQUIRE_ARG(count > 0 && count <= static_cast<std::size_t>(INT_MAX), function, "count",
                  "is " + std::to_string(count) + "; a message has 1 to INT_MAX elements" + on);
  DTL_REQUIRE_ARG(buf != nullptr, function, "buf", "is null" + on);
  PeerInfo info;
  info.op = op;
  info.peer = peer;
  info.tag = tag;
  info.count = count;
  info.dtype = dtype;
  std::ostringstream out;
  out << (op == PeerOp::kSend ? "send (tag " : "recv (tag ") << tag << (op == PeerOp::kSend ? " to rank " : " from rank ")
      << peer << ", " << count << " x " << dtype_name(dtype) << " = " << format_bytes(count * dtype_size(dtype))
      << ") on " << name() << ", rank " << rank();
  info.description = out.str();
  return info;
}

Work PeerLink::isend(const void* buf, std::size_t count, DType dtype, int peer, int tag) {
  const PeerInfo info = describe(PeerOp::kSend, buf, count, dtype, peer, tag);
  return Work(do_isend(buf, info), timeout());
}

Work PeerLink::irecv(void* buf, std::size_t count, DType dtype, int peer, int tag) {
  const PeerInfo info = describe(PeerOp::kRecv, buf, count, dtype, peer, tag);
  return Work(do_irecv(buf, info), timeout());
}

namespace {

// One MPI request. wait_until() blocks in MPI_Wait whatever the deadline (see the class comment).
class MpiRequestWork final : public WorkImpl {
 public:
  explicit MpiRequestWork(std::string description) : WorkImpl(std::move(description)) {}
  ~MpiRequestWork() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);  // Work waits first; never reached
  }
  bool test() override {
    if (request == MPI_REQUEST_NULL) return true;
    int done = 0;
    DTL_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) set_end(clock_seconds());
    return done != 0;
  }
  bool wait_until(double /*deadline_seconds*/) override {
    if (request != MPI_REQUEST_NULL) {
      DTL_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
      set_end(clock_seconds());
    }
    return true;
  }
  MPI_Request request = MPI_REQUEST_NULL;  ///< the operation's request; MPI_REQUEST_NULL once complete
};

}  // namespace

MpiPeerLink::MpiPeerLink(MPI_Comm comm) : comm_(comm) {
  const auto [rank, size] = rank_and_size(comm_);
  rank_ = rank;
  size_ = size;
}

std::unique_ptr<WorkImpl> MpiPeerLink::do_isend(const void* buf, const PeerInfo& info) {
  auto work = std::make_unique<MpiRequestWork>(info.description);
  DTL_MPI_CHECK(MPI_Isend(buf, static_cast<int>(info.count), mpi_datatype_of(info.dtype), info.peer, info.tag, comm_,
                          &work->request));
  return work;
}

std::unique_ptr<WorkImpl> MpiPeerLink::do_irecv(void* buf, const PeerInfo& info) {
  auto work = std::make_unique<MpiRequestWork>(info.description);
  DTL_MPI_CHECK(MPI_Irecv(buf, static_cast<int>(info.count), mpi_datatype_of(info.dtype), info.peer, info.tag, comm_,
                          &work->request));
  return work;
}

}  // namespace dtl
