// What the PMPI wrappers call (internal to the tracer: mpi_tracer.cc defines it,
// mpi_tracer_p2p.cc and mpi_tracer_collectives.cc use it). Not for labs or tests:
// they use mpi_tracer.h.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dtl::trace {

/// @brief Records entry into one PMPI call on construction and its exit on
/// destruction, for this thread; counts the call by name.
class CallScope {
 public:
  /// @param[in] name the MPI function, e.g. "MPI_Send" (counted).
  /// @param[in] text what a report shows, e.g. "MPI_Send(dest=1, tag=0, 4 B)".
  /// @param[in] blocking false for a call that returns at once (a report says "polling in").
  CallScope(const char* name, std::string text, bool blocking = true);
  /// @brief Records this thread's exit from the call (it becomes the thread's last call).
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
};

/// @brief The bytes of `count` elements of `type`; 0 for MPI_DATATYPE_NULL or count <= 0.
std::size_t payload(int count, MPI_Datatype type);
/// @brief "NAME(dest=D, tag=T, N B)".
std::string send_text(const char* name, int count, MPI_Datatype type, int dest, int tag);
/// @brief "NAME(source=S, tag=T, up to N B)".
std::string recv_text(const char* name, int count, MPI_Datatype type, int source, int tag);
/// @brief Counts one point-to-point send (nothing for MPI_PROC_NULL).
void count_send(int count, MPI_Datatype type, int dest, int tag);
/// @brief Counts a receive's wildcards.
void count_receive(int source, int tag);
/// @brief Remembers what a nonblocking call's request is for, e.g. "Irecv(source=0, ...)".
void remember_request(MPI_Request request, std::string text);
/// @brief "NAME(2 requests: Irecv(...), Isend(...))".
std::string pending_text(const char* name, int n, const MPI_Request* requests);
/// @brief Forgets the requests that a wait or test set to MPI_REQUEST_NULL.
void forget_completed(int n, const MPI_Request* before, const MPI_Request* after);

// The wrappers of MPI_Wait* and MPI_Test*: record the pending requests, make
// the call, then forget the requests it completed.
template <typename Call>
int with_requests(const char* name, int n, MPI_Request* requests, bool blocking, Call call) {
  std::vector<MPI_Request> before(requests, requests + (n > 0 ? n : 0));
  int rc;
  {
    CallScope scope(name, pending_text(name, n, requests), blocking);
    rc = call();
  }
  forget_completed(n, before.data(), requests);
  return rc;
}

}  // namespace dtl::trace
