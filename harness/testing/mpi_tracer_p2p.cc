// The PMPI tracer's wrappers of point-to-point calls, waits, tests and probes:
// each counts what it sends, records the call (CallScope), forwards to PMPI_*.
// Each has the exact signature of Open MPI's mpi.h.
#include <mpi.h>

#include "harness/testing/mpi_tracer_calls.h"

using dtl::trace::CallScope;

extern "C" {

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  dtl::trace::count_send(count, type, dest, tag);
  CallScope scope("MPI_Send", dtl::trace::send_text("MPI_Send", count, type, dest, tag));
  return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  dtl::trace::count_send(count, type, dest, tag);
  CallScope scope("MPI_Ssend", dtl::trace::send_text("MPI_Ssend", count, type, dest, tag));
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  dtl::trace::count_send(count, type, dest, tag);
  CallScope scope("MPI_Bsend", dtl::trace::send_text("MPI_Bsend", count, type, dest, tag));
  return PMPI_Bsend(buf, count, type, dest, tag, comm);
}

int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  dtl::trace::count_send(count, type, dest, tag);
  CallScope scope("MPI_Rsend", dtl::trace::send_text("MPI_Rsend", count, type, dest, tag));
  return PMPI_Rsend(buf, count, type, dest, tag, comm);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  dtl::trace::count_receive(source, tag);
  CallScope scope("MPI_Recv", dtl::trace::recv_text("MPI_Recv", count, type, source, tag));
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Sendrecv(const void* send_buf, int send_count, MPI_Datatype send_type, int dest,
                 int send_tag, void* recv_buf, int recv_count, MPI_Datatype recv_type,
                 int source, int recv_tag, MPI_Comm comm, MPI_Status* status) {
  dtl::trace::count_send(send_count, send_type, dest, send_tag);
  dtl::trace::count_receive(source, recv_tag);
  CallScope scope("MPI_Sendrecv",
                  dtl::trace::send_text("MPI_Sendrecv", send_count, send_type, dest, send_tag) +
                      " + " + dtl::trace::recv_text("recv", recv_count, recv_type, source, recv_tag));
  return PMPI_Sendrecv(send_buf, send_count, send_type, dest, send_tag, recv_buf, recv_count,
                       recv_type, source, recv_tag, comm, status);
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int send_tag,
                         int source, int recv_tag, MPI_Comm comm, MPI_Status* status) {
  dtl::trace::count_send(count, type, dest, send_tag);
  dtl::trace::count_receive(source, recv_tag);
  CallScope scope("MPI_Sendrecv_replace",
                  dtl::trace::send_text("MPI_Sendrecv_replace", count, type, dest, send_tag) +
                      " + " + dtl::trace::recv_text("recv", count, type, source, recv_tag));
  return PMPI_Sendrecv_replace(buf, count, type, dest, send_tag, source, recv_tag, comm, status);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  dtl::trace::count_send(count, type, dest, tag);
  const int rc = [&] {
    CallScope scope("MPI_Isend", dtl::trace::send_text("MPI_Isend", count, type, dest, tag), false);
    return PMPI_Isend(buf, count, type, dest, tag, comm, request);
  }();
  if (rc == MPI_SUCCESS) {
    dtl::trace::remember_request(*request, dtl::trace::send_text("Isend", count, type, dest, tag));
  }
  return rc;
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  dtl::trace::count_send(count, type, dest, tag);
  const int rc = [&] {
    CallScope scope("MPI_Issend", dtl::trace::send_text("MPI_Issend", count, type, dest, tag), false);
    return PMPI_Issend(buf, count, type, dest, tag, comm, request);
  }();
  if (rc == MPI_SUCCESS) {
    dtl::trace::remember_request(*request, dtl::trace::send_text("Issend", count, type, dest, tag));
  }
  return rc;
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  dtl::trace::count_receive(source, tag);
  const int rc = [&] {
    CallScope scope("MPI_Irecv", dtl::trace::recv_text("MPI_Irecv", count, type, source, tag), false);
    return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  }();
  if (rc == MPI_SUCCESS) {
    dtl::trace::remember_request(*request, dtl::trace::recv_text("Irecv", count, type, source, tag));
  }
  return rc;
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  return dtl::trace::with_requests("MPI_Wait", 1, request, true, [&] { return PMPI_Wait(request, status); });
}

int MPI_Waitall(int n, MPI_Request requests[], MPI_Status statuses[]) {
  return dtl::trace::with_requests("MPI_Waitall", n, requests, true,
                                   [&] { return PMPI_Waitall(n, requests, statuses); });
}

int MPI_Waitany(int n, MPI_Request requests[], int* index, MPI_Status* status) {
  return dtl::trace::with_requests("MPI_Waitany", n, requests, true,
                                   [&] { return PMPI_Waitany(n, requests, index, status); });
}

int MPI_Waitsome(int n, MPI_Request requests[], int* out_count, int indices[], MPI_Status statuses[]) {
  return dtl::trace::with_requests("MPI_Waitsome", n, requests, true,
                                   [&] { return PMPI_Waitsome(n, requests, out_count, indices, statuses); });
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  return dtl::trace::with_requests("MPI_Test", 1, request, false,
                                   [&] { return PMPI_Test(request, flag, status); });
}

int MPI_Testall(int n, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  return dtl::trace::with_requests("MPI_Testall", n, requests, false,
                                   [&] { return PMPI_Testall(n, requests, flag, statuses); });
}

int MPI_Testany(int n, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  return dtl::trace::with_requests("MPI_Testany", n, requests, false,
                                   [&] { return PMPI_Testany(n, requests, index, flag, status); });
}

int MPI_Testsome(int n, MPI_Request requests[], int* out_count, int indices[], MPI_Status statuses[]) {
  return dtl::trace::with_requests("MPI_Testsome", n, requests, false,
                                   [&] { return PMPI_Testsome(n, requests, out_count, indices, statuses); });
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  dtl::trace::count_receive(source, tag);
  CallScope scope("MPI_Iprobe", dtl::trace::recv_text("MPI_Iprobe", 0, MPI_BYTE, source, tag), false);
  return PMPI_Iprobe(source, tag, comm, flag, status);
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  dtl::trace::count_receive(source, tag);
  CallScope scope("MPI_Probe", dtl::trace::recv_text("MPI_Probe", 0, MPI_BYTE, source, tag));
  return PMPI_Probe(source, tag, comm, status);
}

}  // extern "C"
