/// @file
/// @brief RAII for MPI: the session (MPI_Init_thread / MPI_Finalize) and
/// communicators we own (duplicates with MPI_ERRORS_RETURN).
///
/// Why duplicate? A library that sends on the caller's communicator can match
/// the caller's own messages by accident. A duplicate is a separate matching
/// context, so the lab code's messages can never be confused with the test's.
/// Why MPI_ERRORS_RETURN? The default handler aborts the whole job with a terse
/// message; returning the code lets DTL_MPI_CHECK throw a dtl::MpiError that
/// names the call, the file:line and the rank.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/error.h"

namespace dtl {

/// @brief Owns MPI initialization for the lifetime of the process's main().
///
/// Construct exactly once, first thing in main(); the destructor finalizes.
/// The provided thread level is checked: if MPI gives less than asked, the
/// constructor throws rather than letting threaded code race inside MPI.
class MpiSession {
 public:
  /// @param[in] argc,argv main's arguments (MPI may consume some).
  /// @param[in] required the thread level needed, e.g. MPI_THREAD_MULTIPLE.
  /// @throws MpiError if initialization fails or the level is not provided.
  MpiSession(int* argc, char*** argv, int required = MPI_THREAD_SERIALIZED);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  /// @return the thread level MPI provided (at least the one required).
  int thread_level() const noexcept { return provided_; }

 private:
  int provided_ = MPI_THREAD_SINGLE;
};

/// @brief A communicator we own: a duplicate of another, with MPI_ERRORS_RETURN.
///
/// Move-only; the destructor frees it (never throws). Converts to MPI_Comm so it
/// can be passed straight to MPI calls and to lab functions taking `MPI_Comm`.
class Comm {
 public:
  /// @brief Duplicates `parent` (collective over `parent`).
  /// @param[in] parent the communicator to duplicate.
  /// @throws MpiError if MPI_Comm_dup fails.
  explicit Comm(MPI_Comm parent);
  Comm() noexcept = default;
  ~Comm();
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  /// @brief A duplicate of MPI_COMM_WORLD (collective over all processes).
  static Comm world() { return Comm(MPI_COMM_WORLD); }

  /// @return this process's rank in the communicator.
  int rank() const noexcept { return rank_; }
  /// @return the number of processes in the communicator.
  int size() const noexcept { return size_; }
  /// @return the underlying handle (still owned by this object).
  MPI_Comm get() const noexcept { return comm_; }
  /// @return the underlying handle, so a Comm can be passed where MPI_Comm is expected.
  operator MPI_Comm() const noexcept { return comm_; }  // NOLINT(google-explicit-constructor)

  /// @brief MPI_Barrier on this communicator (collective).
  void barrier() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};

/// @brief The MPI datatype for a C++ element type, e.g. mpi_datatype<float>() is MPI_FLOAT.
template <typename T>
MPI_Datatype mpi_datatype();
template <> inline MPI_Datatype mpi_datatype<std::byte>() { return MPI_BYTE; }
template <> inline MPI_Datatype mpi_datatype<char>() { return MPI_CHAR; }
template <> inline MPI_Datatype mpi_datatype<std::int32_t>() { return MPI_INT32_T; }
template <> inline MPI_Datatype mpi_datatype<std::int64_t>() { return MPI_INT64_T; }
template <> inline MPI_Datatype mpi_datatype<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype mpi_datatype<double>() { return MPI_DOUBLE; }

/// @brief "1 MiB", "4 KiB", "17 B": a byte count as people write it.
std::string format_bytes(std::size_t bytes);

/// @brief Converts a size_t element count to the `int` MPI wants.
/// @param[in] function,argument named in the error.
/// @throws InvalidArgument if `count` exceeds INT_MAX.
int to_mpi_count(std::size_t count, const char* function, const char* argument);

}  // namespace dtl
