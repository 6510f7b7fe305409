// Lab 09, given (not a task; compiled into both builds): the WorkerClient's
// plumbing around your push(), pull(), clock() and finish() (src/worker.cc):
// construction, the destructor that drains the sends still in flight, and send(),
// which never blocks (MPI_Isend from a kept copy, given/worker_internals.h).
#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab09/parameter_server.h"
#include "worker_internals.h"

namespace dtl::lab09 {

WorkerClient::WorkerClient(const PsGroup& group, int start_clock) : group_(&group), clock_(start_clock) {
  DTL_REQUIRE_ARG(!group.is_server(), "WorkerClient", "group",
                  "rank " + std::to_string(group.comm().rank()) + " is a server (workers are ranks " +
                      std::to_string(group.servers()) + " and up)");
  DTL_REQUIRE_ARG(start_clock >= 0, "WorkerClient", "start_clock", "is negative");
  impl_ = new Impl;
}

WorkerClient::~WorkerClient() {
  // A worker that went silent (or failed) may still have sends in flight; the
  // servers drain every message, so they complete soon. Past the timeout they are
  // freed and their buffers leaked on purpose (MPI may still read them).
  const double deadline = MPI_Wtime() + group_->options().timeout_seconds;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    while (!impl_->requests.empty() && MPI_Wtime() < deadline) {
      try {
        impl_->reap();
      } catch (...) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    for (MPI_Request& r : impl_->requests) MPI_Request_free(&r);
    for (std::vector<std::byte>& b : impl_->buffers) new std::vector<std::byte>(std::move(b));  // NOLINT: leaked
  }
  delete impl_;
}

void WorkerClient::send(int dest, int tag, std::vector<std::byte> bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->reap();
  impl_->buffers.push_back(std::move(bytes));  // a moved vector keeps its storage: the pointer stays valid
  impl_->requests.push_back(MPI_REQUEST_NULL);
  DTL_MPI_CHECK(MPI_Isend(impl_->buffers.back().data(), static_cast<int>(impl_->buffers.back().size()), MPI_BYTE,
                          dest, tag, group_->comm(), &impl_->requests.back()));
}

}  // namespace dtl::lab09
