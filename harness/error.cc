// The dtl::Error family: building messages that name the rank, host and cause.
#include "harness/error.h"

#include <mpi.h>
#include <unistd.h>

#include <sstream>

namespace dtl {

NotImplemented::NotImplemented(const std::string& function)
    : Error(function + " is not implemented yet (TODO(student) in the lab's src/) [" +
            where_am_i() + "]") {}

std::string where_am_i() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return std::string("host ") + host;
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::ostringstream out;
  out << "rank " << rank << " of " << size << " on " << host;
  return out.str();
}

void throw_invalid_argument(const char* function, const char* argument,
                            const std::string& why) {
  throw InvalidArgument(std::string(function) + ": argument '" + argument + "' " + why +
                        " [" + where_am_i() + "]");
}

namespace detail {

void throw_mpi_error(int code, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int length = 0;
  MPI_Error_string(code, text, &length);
  std::ostringstream out;
  out << expr << " failed at " << file << ":" << line << " [" << where_am_i()
      << "]: " << text << " (code " << code << ")";
  throw MpiError(out.str(), code);
}

void throw_cuda_error(int code, const char* name, const char* text, const char* expr,
                      const char* file, int line) {
  std::ostringstream out;
  out << expr << " failed at " << file << ":" << line << " [" << where_am_i()
      << "]: " << name << ": " << text;
  throw CudaError(out.str(), code);
}

void throw_nccl_error(int code, const char* text, const char* expr, const char* file,
                      int line) {
  std::ostringstream out;
  out << expr << " failed at " << file << ":" << line << " [" << where_am_i()
      << "]: " << text << " (ncclResult_t " << code << ")";
  throw NcclError(out.str(), code);
}

}  // namespace detail
}  // namespace dtl
