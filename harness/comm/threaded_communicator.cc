// A Communicator from blocking functions, run in issue order on a CommThread.
#include "harness/comm/threaded_communicator.h"

#include <algorithm>
#include <string>
#include <utility>

#include "harness/comm/mpi_communicator.h"

namespace dtl {

namespace {
// Checked before MPI_Comm_dup, so that every rank throws before any collective.
MPI_Comm checked_parent(MPI_Comm parent, const std::string& name) {
  if (!MpiCommunicator::thread_multiple_available()) {
    throw Error("ThreadedCommunicator '" + name + "': MPI was initialized without MPI_THREAD_MULTIPLE [" +
                where_am_i() + "]; its communication thread calls MPI while the main thread may too. See Note "
                "[Why a communication thread] in harness/comm/mpi_communicator.h.");
  }
  return parent;
}

template <typename F>
void require_op(const F& function, const char* collective, const std::string& name) {
  DTL_REQUIRE_ARG(static_cast<bool>(function), collective, "ops",
                  "has no " + std::string(collective) + " function in backend '" + name + "'");
}

void require_dtype(const std::vector<DType>& dtypes, DType dtype, const char* collective, const std::string& name) {
  if (dtypes.empty() || std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end()) return;
  std::string known;
  for (DType d : dtypes) known += (known.empty() ? "" : ", ") + std::string(dtype_name(d));
  throw_invalid_argument(collective, "dtype",
                         std::string(dtype_name(dtype)) + " is not supported by backend '" + name + "' (it takes " +
                             known + ")");
}
}  // namespace

ThreadedCommunicator::ThreadedCommunicator(MPI_Comm parent, std::string name, BlockingCollectives ops)
    : name_(std::move(name)), ops_(std::move(ops)), comm_(checked_parent(parent, name_)) {
  thread_ = std::make_unique<CommThread>(name_);
}

ThreadedCommunicator::~ThreadedCommunicator() { thread_.reset(); }  // drain, then free comm_

// do_allreduce: queues ops.allreduce.
std::unique_ptr<WorkImpl> ThreadedCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  require_op(ops_.allreduce, "allreduce", name_);
  require_dtype(ops_.dtypes, info.dtype, "allreduce", name_);
  return thread_->submit(info.description, [this, buf, info] {
    ops_.allreduce(comm_.get(), buf, info.count, info.dtype, info.op);
  });
}

// do_broadcast: queues ops.broadcast.
std::unique_ptr<WorkImpl> ThreadedCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  require_op(ops_.broadcast, "broadcast", name_);
  require_dtype(ops_.dtypes, info.dtype, "broadcast", name_);
  return thread_->submit(info.description, [this, buf, info] {
    ops_.broadcast(comm_.get(), buf, info.count, info.dtype, info.root);
  });
}

// do_reduce_scatter: Queues ops.reduce_scatter.
std::unique_ptr<WorkImpl> ThreadedCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                 const OpInfo& info) {
  require_op(ops_.reduce_scatter, "reduce_scatter", name_);
  require_dtype(ops_.dtypes, info.dtype, "reduce_scatter", name_);
  return thread_->submit(info.description, [this, send_buf, recv_buf, info] {
    ops_.reduce_scatter(comm_.get(), send_buf, recv_buf, info.count, info.dtype, info.op);
  });
}

// do_allgather: Queues ops.allgather.
std::unique_ptr<WorkImpl> ThreadedCommunicator::do_allgather(const void* send_buf, void* recv_buf,
                                                             const OpInfo& info) {
  require_op(ops_.allgather, "allgather", name_);
  require_dtype(ops_.dtypes, info.dtype, "allgather", name_);
  return thread_->submit(info.description, [this, send_buf, recv_buf, info] {
    ops_.allgather(comm_.get(), send_buf, recv_buf, info.count, info.dtype);
  });
}

}  // namespace dtl
