/// @file
/// @brief The dtl::Error family and the checks that throw it.
///
/// Every failure the labs can meet — an MPI, CUDA or NCCL error code, a bad
/// argument, a function a student has not written yet, a wait that timed out —
/// becomes an exception deriving from dtl::Error whose what() says what failed,
/// where (file:line), on which rank and host, and why (the library's own text).
#pragma once

#include <stdexcept>
#include <string>

namespace dtl {

/// @brief Base of every exception dtlabs throws.
class Error : public std::runtime_error {
 public:
  /// @param[in] message the complete, human-readable message.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// @brief An MPI call returned an error code.
class MpiError : public Error {
 public:
  /// @param[in] message full message; @param[in] code the MPI error code.
  MpiError(const std::string& message, int code) : Error(message), code_(code) {}
  /// @return the MPI error code the call returned.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// @brief A CUDA runtime call or kernel launch failed.
class CudaError : public Error {
 public:
  /// @param[in] message full message; @param[in] code the cudaError_t value.
  CudaError(const std::string& message, int code) : Error(message), code_(code) {}
  /// @return the cudaError_t value, as an int.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// @brief An NCCL call failed.
class NcclError : public Error {
 public:
  /// @param[in] message full message; @param[in] code the ncclResult_t value.
  NcclError(const std::string& message, int code) : Error(message), code_(code) {}
  /// @return the ncclResult_t value, as an int.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// @brief A caller passed an argument the function cannot accept.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// @brief A lab function whose body is still a `TODO(student)`.
class NotImplemented : public Error {
 public:
  /// @param[in] function the name of the function that is not written yet.
  explicit NotImplemented(const std::string& function);
};

/// @brief A wait ran past its deadline; the message says what it waited for.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// @brief Names this process for error messages.
/// @return "rank R of P on HOST" when MPI is initialized, else "host HOST".
std::string where_am_i();

/// @brief Throws InvalidArgument naming the function, the argument and this rank.
/// @param[in] function the public function that was called, e.g. "ring_shift".
/// @param[in] argument the parameter at fault, e.g. "recv_buf".
/// @param[in] why what is wrong with it.
/// @throws InvalidArgument always.
[[noreturn]] void throw_invalid_argument(const char* function, const char* argument,
                                         const std::string& why);

namespace detail {
[[noreturn]] void throw_mpi_error(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cuda_error(int code, const char* name, const char* text,
                                   const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(int code, const char* text, const char* expr,
                                   const char* file, int line);
}  // namespace detail

}  // namespace dtl

/// @brief Evaluates an MPI call once; throws dtl::MpiError unless it returned MPI_SUCCESS.
/// Only communicators with MPI_ERRORS_RETURN (every dtl::Comm) return errors to check.
#define DTL_MPI_CHECK(expr)                                                    \
  do {                                                                         \
    const int dtl_mpi_rc_ = (expr);                                            \
    if (dtl_mpi_rc_ != 0 /* MPI_SUCCESS */) {                                  \
      ::dtl::detail::throw_mpi_error(dtl_mpi_rc_, #expr, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)

/// @brief Throws dtl::InvalidArgument naming `function`, `argument` and the rank
/// unless `cond` holds.
#define DTL_REQUIRE_ARG(cond, function, argument, why)                 \
  do {                                                                 \
    if (!(cond)) ::dtl::throw_invalid_argument(function, argument, why); \
  } while (0)
