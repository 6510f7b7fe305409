// HostDeviceCommunicator: each operation to the backend of its buffers. See
// Note [Host and device buffers] in the header.
#include "harness/comm/host_device_communicator.h"

#include <algorithm>
#include <utility>

#include "harness/error.h"

namespace dtl {

namespace {

// The inner backend's Work as this communicator's WorkImpl, with its times.
class Forward final : public WorkImpl {
 public:
  Forward(Work work, const OpInfo& info) : WorkImpl(info.description), work_(std::move(work)) {}
  bool test() override { return done(work_.test()); }
  bool wait_until(double deadline) override { return done(work_.wait_for(std::max(0.0, deadline - clock_seconds()))); }

 private:
  bool done(bool complete) {
    if (complete) {
      set_start(work_.start_seconds());
      set_end(work_.end_seconds());
    }
    return complete;
  }
  Work work_;
};

}  // namespace

HostDeviceCommunicator::HostDeviceCommunicator(std::unique_ptr<Communicator> host,
                                               std::unique_ptr<Communicator> device, IsDevice is_device)
    : host_(std::move(host)), device_(std::move(device)), is_device_(std::move(is_device)) {
  if (!host_ || !device_ || !is_device_) {
    throw InvalidArgument("HostDeviceCommunicator: the host backend, the device backend and is_device are all needed");
  }
  if (host_->rank() != device_->rank() || host_->world_size() != device_->world_size()) {
    throw InvalidArgument("HostDeviceCommunicator: the backends disagree: " + host_->name() + " is rank " +
                          std::to_string(host_->rank()) + " of " + std::to_string(host_->world_size()) + ", " +
                          device_->name() + " rank " + std::to_string(device_->rank()) + " of " +
                          std::to_string(device_->world_size()));
  }
  set_timeout(std::max(host_->timeout(), device_->timeout()));
}

// An empty operation (count 0) may have null buffers: it goes to the host backend.
Communicator& HostDeviceCommunicator::route(const char* function, const void* a, const void* b,
                                            const OpInfo& info) const {
  const bool a_device = a != nullptr && is_device_(a);
  const bool b_device = b != nullptr && is_device_(b);
  if (a != nullptr && b != nullptr && a_device != b_device) {
    throw InvalidArgument(std::string("HostDeviceCommunicator::") + function + ": " + info.description +
                          " has one buffer on the host and one on a device; both must be in one place");
  }
  return a_device || b_device ? *device_ : *host_;
}

// do_allreduce: the same allreduce on the backend of `buf`.
std::unique_ptr<WorkImpl> HostDeviceCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  Communicator& backend = route("allreduce", buf, nullptr, info);
  return std::make_unique<Forward>(backend.allreduce(buf, info.count, info.dtype, info.op), info);
}

// do_broadcast: the same broadcast on the backend of `buf`.
std::unique_ptr<WorkImpl> HostDeviceCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  Communicator& backend = route("broadcast", buf, nullptr, info);
  return std::make_unique<Forward>(backend.broadcast(buf, info.count, info.dtype, info.root), info);
}

// do_reduce_scatter: on the backend of both buffers.
std::unique_ptr<WorkImpl> HostDeviceCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                    const OpInfo& info) {
  Communicator& backend = route("reduce_scatter", send_buf, recv_buf, info);
  return std::make_unique<Forward>(backend.reduce_scatter(send_buf, recv_buf, info.count, info.dtype, info.op), info);
}

// do_allgather: on the backend of both buffers.
std::unique_ptr<WorkImpl> HostDeviceCommunicator::do_allgather(const void* send_buf, void* recv_buf,
                                                               const OpInfo& info) {
  Communicator& backend = route("allgather", send_buf, recv_buf, info);
  return std::make_unique<Forward>(backend.allgather(send_buf, recv_buf, info.count, info.dtype), info);
}

}  // namespace dtl
