/// @file
/// @brief What an MPI test needs: the per-test communicator and rank-aware checks.
///
/// Every test binary links harness/testing/gtest_mpi_main.cc, which runs the same
/// tests in the same order on every rank and gives each test a fresh duplicate of
/// MPI_COMM_WORLD. A failure on any rank fails the test on all of them and is
/// shown by rank 0 with the rank it came from.
///
/// The one rule: never ASSERT_* (or return early) before a collective or a
/// matching send/recv. A rank that leaves early makes the others wait forever.
/// Use EXPECT_* and keep going; the helpers here return AssertionResult so that
/// they read `EXPECT_TRUE(dtl::testing::buffers_equal(...))`.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"

namespace dtl::testing {

/// @brief The communicator of the running test.
/// @return a fresh duplicate of MPI_COMM_WORLD for each test, so no message can
///         leak from one test to the next.
/// @throws Error when called outside a test.
const Comm& comm();

/// @brief Logical AND over the ranks of comm() (collective: every rank must call it).
/// @param[in] local this rank's value.
/// @return true on every rank if `local` is true on every rank.
bool all_ranks(bool local);

/// @brief A deterministic byte pattern that differs by `seed` (use the rank, a step...).
/// Byte i is (i * 131 + seed * 37 + 1) mod 251: never constant, never all zero,
/// and different for neighbouring seeds, so a message from the wrong rank shows.
/// @param[in] n the number of bytes.
/// @param[in] seed what makes this pattern differ from others.
/// @return the bytes.
inline std::vector<std::byte> pattern_bytes(std::size_t n, int seed) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) {
    bytes[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(seed) * 37 + 1) % 251);
  }
  return bytes;
}

/// @brief Prints one value for a failure message (bytes as numbers, not characters).
/// @param[in] value the value.
/// @return its text.
template <typename T>
std::string show(const T& value) {
  std::ostringstream out;
  if constexpr (std::is_same_v<T, std::byte>) {
    out << "0x" << std::hex << static_cast<int>(value);
  } else {
    out << value;
  }
  return out.str();
}

/// @brief Compares two buffers element by element, exactly (NaN equals NaN).
/// @param[in] expected what the oracle says.
/// @param[in] actual what the code under test produced.
/// @param[in] what the buffer's name in the message, e.g. "recv_buf".
/// @return success, or a failure naming the rank, the first differing index,
///         expected vs got, and how many elements differ.
template <typename T>
::testing::AssertionResult buffers_equal(std::span<const T> expected, std::span<const T> actual,
                                         const std::string& what) {
  const int rank = comm().rank();
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "rank " << rank << ": " << what << " has "
                                         << actual.size() << " elements, expected "
                                         << expected.size();
  }
  std::size_t first = expected.size();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const bool same = expected[i] == actual[i] ||
                      (std::is_floating_point_v<T> && std::isnan(static_cast<double>(expected[i])) &&
                       std::isnan(static_cast<double>(actual[i])));
    if (!same) {
      if (wrong == 0) first = i;
      ++wrong;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "rank " << rank << ": " << what << "[" << first << "] expected "
         << show(expected[first]) << " got " << show(actual[first]) << " (" << wrong << " of "
         << expected.size() << " elements differ)";
}

/// @brief Overload for containers (std::vector and the like).
/// @param[in] expected what the oracle says.
/// @param[in] actual what the code under test produced.
/// @param[in] what the buffer's name in the message.
/// @return as the span overload.
template <typename A, typename B>
::testing::AssertionResult buffers_equal(const A& expected, const B& actual, const std::string& what) {
  using T = std::remove_cv_t<typename A::value_type>;
  return buffers_equal<T>(std::span<const T>(expected), std::span<const T>(actual), what);
}

/// @brief Checks that a message the test sent before calling the code under
/// test is still waiting, untouched, and receives it.
///
/// The tag tests send decoys (another tag, or the same tag from another rank)
/// before the call; code that receives with MPI_ANY_TAG, MPI_ANY_SOURCE or a
/// wrong tag swallows one. This polls MPI_Iprobe for up to `seconds` instead of
/// blocking in MPI_Recv, so a swallowed decoy is a clear failure, not a hang.
/// @param[in] source the rank that sent it.
/// @param[in] tag its tag.
/// @param[in] expected its contents.
/// @param[in] what its name in the message.
/// @param[in] seconds how long to wait for it to show up.
/// @return success, or a failure saying the message was taken by the code under test.
template <typename T>
::testing::AssertionResult pending_message(int source, int tag, std::span<const T> expected,
                                           const std::string& what, double seconds = 2.0) {
  const double deadline = MPI_Wtime() + seconds;
  int found = 0;
  MPI_Status status;
  while (!found && MPI_Wtime() < deadline) {
    DTL_MPI_CHECK(MPI_Iprobe(source, tag, comm(), &found, &status));
  }
  if (!found) {
    return ::testing::AssertionFailure()
           << "rank " << comm().rank() << ": " << what << " (from rank " << source << ", tag " << tag
           << ") was not waiting after the call: the code under test received it. Receive with the "
              "peer's rank and the given tag, never MPI_ANY_SOURCE or MPI_ANY_TAG.";
  }
  std::vector<T> got(expected.size());
  DTL_MPI_CHECK(MPI_Recv(got.data(), static_cast<int>(got.size() * sizeof(T)), MPI_BYTE, source, tag,
                         comm(), MPI_STATUS_IGNORE));
  return buffers_equal<T>(expected, std::span<const T>(got), what);
}

/// @brief Overload for containers.
/// @param[in] source,tag,expected,what as above.
/// @return as above.
template <typename C>
::testing::AssertionResult pending_message(int source, int tag, const C& expected, const std::string& what) {
  using T = std::remove_cv_t<typename C::value_type>;
  return pending_message<T>(source, tag, std::span<const T>(expected), what);
}

}  // namespace dtl::testing

/// @brief Skips the test on every rank, with `reason`, when `condition` holds on any rank.
/// Skipping is collective: a skip on one rank alone would leave the others waiting.
#define DTL_SKIP_IF_ANY(condition, reason)                                    \
  do {                                                                        \
    if (!::dtl::testing::all_ranks(!(condition))) GTEST_SKIP() << (reason);   \
  } while (0)
