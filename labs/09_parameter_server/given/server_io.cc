// Lab 09, given (not a task; compiled into both builds): the parameter server's
// plumbing around your event loop (src/server.cc): construction (its key range
// and values), replies that never block the loop (MPI_Isend from a buffer kept
// until the send completes), and handle(), which decodes a message and passes it
// to the on_push(), on_clock() and on_pull() you write.
#include <mpi.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

ParameterServer::ParameterServer(const PsGroup& group, std::span<const float> initial)
    : group_(&group), clock_(group.workers()) {
  DTL_REQUIRE_ARG(group.is_server(), "ParameterServer", "group",
                  "rank " + std::to_string(group.comm().rank()) + " is a worker (servers are ranks 0 .. " +
                      std::to_string(group.servers() - 1) + ")");
  const std::vector<std::int64_t>& offsets = group.key_offsets();
  DTL_REQUIRE_ARG(static_cast<std::int64_t>(initial.size()) == offsets.back(), "ParameterServer", "initial",
                  "has " + std::to_string(initial.size()) + " floats; the keys hold " + std::to_string(offsets.back()));
  server_ = group.comm().rank();
  first_key_ = group.bounds()[static_cast<std::size_t>(server_)];
  end_key_ = group.bounds()[static_cast<std::size_t>(server_) + 1];
  base_ = offsets[static_cast<std::size_t>(first_key_)];
  values_.assign(initial.begin() + base_, initial.begin() + offsets[static_cast<std::size_t>(end_key_)]);
  for (int k = first_key_; k < end_key_; ++k) sgd_.emplace_back(group.options().sgd, group.key_sizes()[k]);
  last_heard_.assign(static_cast<std::size_t>(group.workers()), 0.0);
  done_.assign(static_cast<std::size_t>(group.workers()), false);
}

void ParameterServer::send(int worker, int tag, std::vector<std::byte> bytes) {
  send_buffers_.push_back(std::move(bytes));  // moving a vector keeps its storage: the pointer stays valid
  send_requests_.push_back(MPI_REQUEST_NULL);
  DTL_MPI_CHECK(MPI_Isend(send_buffers_.back().data(), static_cast<int>(send_buffers_.back().size()), MPI_BYTE,
                          group_->servers() + worker, tag, group_->comm(), &send_requests_.back()));
}

void ParameterServer::complete_sends() {
  for (std::size_t i = 0; i < send_requests_.size();) {
    int done = 0;
    DTL_MPI_CHECK(MPI_Test(&send_requests_[i], &done, MPI_STATUS_IGNORE));
    if (done) {
      send_requests_.erase(send_requests_.begin() + static_cast<std::ptrdiff_t>(i));
      send_buffers_.erase(send_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void ParameterServer::reply(int worker, int key, int clock) {
  const std::int64_t begin = group_->key_offsets()[static_cast<std::size_t>(key)] - base_;
  const std::int64_t count = group_->key_sizes()[static_cast<std::size_t>(key)];
  Message m;
  m.a = key;
  m.b = version_;
  m.c = kOk;
  m.values.assign(values_.begin() + begin, values_.begin() + begin + count);
  send(worker, kReply + key, encode(m));
  events_.push_back({EventKind::kPull, worker, clock, version_, clock_.min(), key, 0});
}

void ParameterServer::reply_failed(int worker, int key, const std::string& why) {
  Message m;
  m.a = key;
  m.b = version_;
  m.c = kFailed;
  m.text = why;
  send(worker, kReply + key, encode(m));
}

bool ParameterServer::waiting_here(int worker) const {
  return std::any_of(deferred_.begin(), deferred_.end(), [&](const Pending& p) { return p.worker == worker; });
}

void ParameterServer::handle(int source, int tag, std::span<const std::byte> bytes) {
  const int worker = source - group_->servers();
  if (worker < 0) {
    throw Error("server " + std::to_string(server_) + ": a message with tag " + std::to_string(tag) +
                " from rank " + std::to_string(source) + ", which is a server, not a worker");
  }
  last_heard_[static_cast<std::size_t>(worker)] = MPI_Wtime();
  const Message m = decode(bytes, tag == kPush ? (bytes.size() - 16) / sizeof(float) : 0);
  if (!clock_.live(worker)) {
    // A worker presumed dead spoke again (it was only slow). It is not taken back:
    // its gradients are ignored and its pulls refused, until it says it is done.
    if (tag == kDone) done_[static_cast<std::size_t>(worker)] = true;
    if (tag == kPull) {
      reply_failed(worker, m.a, "worker " + std::to_string(worker) + " was presumed dead by server " +
                                    std::to_string(server_) + " (silent for longer than the timeout) and is no longer served");
    }
    return;
  }
  switch (tag) {
    case kPush: on_push(worker, m); break;
    case kClock: on_clock(worker, m); break;
    case kPull: on_pull(worker, m); break;
    case kDone: done_[static_cast<std::size_t>(worker)] = true; break;
    case kHeartbeat: break;  // last_heard_ is all it is for
    default:
      throw Error("server " + std::to_string(server_) + ": unknown tag " + std::to_string(tag) + " from worker " +
                  std::to_string(worker));
  }
}

}  // namespace dtl::lab09
