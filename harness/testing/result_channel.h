// The grader's authenticated result channel: See Note [Results the grader can trust].
//
// The test main (gtest_mpi_main.cc) writes one record per test start and end to
// DTL_PROGRESS_FILE. Under the grader those records are the results, so they must
// be something the code under test cannot write: each record carries a sequence
// number and an HMAC-SHA256 under a key that the grader makes fresh for every run
// and hands to rank 0's test main before any code of the lab runs. Outside the
// grader (ctest, a student's own mpirun) there is no key and the records are plain
// JSON lines, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtl::testing::detail {

/// @brief The state the grader handed to this process before any code of the lab ran.
class ResultChannel {
 public:
  /// @brief The one channel of this process (loaded by a priority constructor).
  static ResultChannel& instance();

  /// @brief True when the grader asked for authenticated records (DTL_RESULT_KEY was set).
  bool requested() const { return requested_; }
  /// @brief True when this process holds the run's key (rank 0 under the grader).
  bool keyed() const { return keyed_; }
  /// @brief Why the key could not be read ("" when it was, or was not asked for).
  const std::string& error() const { return error_; }
  /// @brief The gtest filter the grader asked for ("" when none): it wins over argv,
  ///        which the code under test can rewrite before main.
  const std::string& filter() const { return filter_; }

  /// @brief One record ready to append: `{"seq":N,...}` with its MAC in front
  ///        ("MAC_HEX JSON"), or the object unchanged when there is no key.
  /// @param[in] json_object a JSON object, starting with '{'.
  /// @pre Called by one thread at a time (the test main's Progress holds a lock).
  std::string seal(const std::string& json_object);

  /// @brief Reads the grader's key (rank 0) or waits at its gate (other ranks).
  ///        Called once, by the priority constructor; public for that alone.
  void load();

 private:
  bool requested_ = false;
  bool keyed_ = false;
  std::string error_;
  std::string filter_;
  std::uint64_t seq_ = 0;
  unsigned char* key_page_ = nullptr;  // 32 bytes of key in a page kept PROT_NONE between uses
};

/// @brief HMAC-SHA256 of `message` under `key` (RFC 2104), as 64 lowercase hex digits.
std::string hmac_sha256_hex(const unsigned char* key, std::size_t key_bytes, const std::string& message);

}  // namespace dtl::testing::detail
