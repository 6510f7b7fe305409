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
#include <type_traits>

#include "harness/dtype.h"
#include "harness/error.h"

namespace dtl {

/// @brief Owns MPI initialization for the lifetime of the process's main().
///
/// Construct exactly once, first thing in main(); the destructor finalizes.
/// The provided thread level is checked: if MPI gives less than asked, the
/// constructor throws rather than letting threaded code race inside MPI.
class MpiSession {
 public:
  /// @param[in,out] argc main's argument count (MPI may consume some).
  /// @param[in,out] argv main's arguments.
  /// @param[in] required the thread level needed, e.g. MPI_THREAD_MULTIPLE.
  /// @throws MpiError if initialization fails or the level is not provided.
  MpiSession(int* argc, char*** argv, int required = MPI_THREAD_SERIALIZED);
  /// @brief Finalizes MPI (unless something already did).
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
  /// @brief An empty handle (MPI_COMM_NULL), to be assigned later.
  Comm() noexcept = default;
  /// @brief Frees the communicator unless MPI is already finalized.
  ~Comm();
  /// @brief Takes over `other`'s communicator; `other` becomes empty.
  /// @param[in,out] other the communicator to move from.
  Comm(Comm&& other) noexcept;
  /// @brief Frees ours, then takes over `other`'s communicator.
  /// @param[in,out] other the communicator to move from.
  /// @return *this.
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  /// @brief A duplicate of MPI_COMM_WORLD (collective over all processes).
  /// @return the new communicator.
  static Comm world() { return Comm(MPI_COMM_WORLD); }
  /// @brief The processes of `parent` that pass the same `color`, ranked by `key`
  /// (MPI_Comm_split; collective over `parent`), with MPI_ERRORS_RETURN.
  /// @param[in] parent the communicator to split.
  /// @param[in] color >= 0: which part this process joins.
  /// @param[in] key the order within the part (ties: the rank in `parent`).
  /// @return this process's part.
  /// @throws MpiError if MPI_Comm_split fails (a negative color, for one).
  static Comm split(MPI_Comm parent, int color, int key);

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
  void adopt(MPI_Comm owned);  // takes `owned`, sets the error handler, rank and size

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};

/// @brief The MPI datatype for a C++ element type.
/// @tparam T std::byte, char, std::int32_t, std::int64_t, float or double.
/// @return e.g. MPI_FLOAT for float.
template <typename T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, std::byte>) return MPI_BYTE;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else static_assert(sizeof(T) == 0, "mpi_datatype: no MPI datatype for this type");
}

/// @brief A byte count as people write it.
/// @param[in] bytes the count.
/// @return "1 MiB", "4 KiB" or "4097 B" (binary units only when exact).
std::string format_bytes(std::size_t bytes);

/// @brief This process's place in a communicator.
struct RankSize {
  int rank;  ///< this process's rank in the communicator
  int size;  ///< the number of processes in it
};

/// @brief The rank and size of `comm`, the first lines of every lab function:
/// `const auto [rank, size] = rank_and_size(comm);`
/// @param[in] comm any communicator.
/// @return this process's rank and the communicator's size.
/// @throws MpiError if MPI cannot tell (e.g. `comm` is MPI_COMM_NULL on an
///         MPI_ERRORS_RETURN handler).
RankSize rank_and_size(MPI_Comm comm);

/// @brief Checks that a buffer holds exactly `blocks` blocks of `block` elements.
/// @param[in] function the public function, named in the error.
/// @param[in] argument the buffer's name, e.g. "recv_buf".
/// @param[in] elements the buffer's size in elements.
/// @param[in] block the elements of one block.
/// @param[in] blocks how many blocks it must hold (usually the communicator size).
/// @throws InvalidArgument unless elements == block * blocks.
void require_blocks(const char* function, const char* argument, std::size_t elements, std::size_t block,
                    int blocks);

/// @brief Checks a message tag, the way every lab function does.
/// @param[in] function the public function, named in the error.
/// @param[in] tag the tag argument.
/// @throws InvalidArgument unless 0 <= tag <= 32767 (the smallest MPI_TAG_UB
///         the MPI standard allows, so the check holds for every MPI).
void require_tag(const char* function, int tag);

/// @brief Checks that a rank argument (a root, a peer) names a rank of the communicator.
/// @param[in] function the public function, named in the error.
/// @param[in] argument the argument's name, e.g. "root".
/// @param[in] rank its value.
/// @param[in] size the communicator's size.
/// @throws InvalidArgument unless 0 <= rank < size.
void require_rank(const char* function, const char* argument, int rank, int size);

/// @brief Converts a size_t element count to the `int` MPI wants.
/// @param[in] count the element count.
/// @param[in] function the public function, named in the error.
/// @param[in] argument the argument the count came from, named in the error.
/// @return `count` as an int.
/// @throws InvalidArgument if `count` exceeds INT_MAX.
int to_mpi_count(std::size_t count, const char* function, const char* argument);

/// @brief The MPI datatype that moves elements of `dtype`. kF16 and kBF16 travel as
/// 16-bit integers: right for moving them, wrong for adding them (no MPI_SUM on these).
/// @param[in] dtype the element type.
/// @return its MPI datatype; MPI_DATATYPE_NULL for a value outside the enum.
MPI_Datatype mpi_datatype_of(DType dtype);

}  // namespace dtl
