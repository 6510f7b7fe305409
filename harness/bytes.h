/// @file
/// @brief ByteWriter and ByteReader: fields to bytes and back, in the host's byte
/// order, for the checkpoints of labs 06 and 09.
///
/// A reader never runs past the end of its bytes: each read checks first, and a
/// short read calls the owner's `fail`, which throws the error that names the
/// owner's argument or file (lab 09: InvalidArgument naming `bytes`; lab 06:
/// CheckpointError naming the file). Lengths read from the bytes are checked
/// against what is left before anything is allocated, so a corrupt length cannot
/// ask for gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace dtl {

/// @brief Appends fields to a byte buffer.
class ByteWriter {
 public:
  /// @brief Appends `n` raw bytes.
  /// @param[in] data where they are.
  /// @param[in] n how many.
  void bytes(const void* data, std::size_t n) {
    const std::size_t at = out_.size();
    out_.resize(at + n);
    if (n > 0) std::memcpy(out_.data() + at, data, n);
  }
  /// @brief Appends a 32-bit integer.
  /// @param[in] v the value.
  void i32(std::int32_t v) { bytes(&v, sizeof v); }
  /// @brief Appends a 64-bit integer.
  /// @param[in] v the value.
  void i64(std::int64_t v) { bytes(&v, sizeof v); }
  /// @brief Appends a string as its i64 length and its bytes.
  /// @param[in] s the string.
  void str(const std::string& s) {
    i64(static_cast<std::int64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  /// @brief Appends floats as their i64 count and their bytes.
  /// @param[in] v the floats.
  void floats(std::span<const float> v) {
    i64(static_cast<std::int64_t>(v.size()));
    bytes(v.data(), v.size_bytes());
  }
  /// @return the bytes written so far.
  const std::vector<std::byte>& data() const noexcept { return out_; }
  /// @return the bytes written, moved out (the writer is then empty).
  std::vector<std::byte> take() noexcept { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

/// @brief Reads fields back, front to back, refusing to run past the end.
class ByteReader {
 public:
  /// @brief What a failed read calls with the reason; it must throw.
  using Fail = std::function<void(const std::string& why)>;
  /// @param[in] in the bytes (not owned: they must outlive the reader).
  /// @param[in] fail called with the reason when a read would run past the end; must throw.
  /// @param[in] at where to start reading (e.g. after a magic the owner checked).
  ByteReader(std::span<const std::byte> in, Fail fail, std::size_t at = 0) : in_(in), fail_(std::move(fail)), at_(at) {}

  /// @brief Reads `n` raw bytes into `data`.
  /// @param[out] data where they go.
  /// @param[in] n how many.
  void bytes(void* data, std::size_t n) {
    if (n > in_.size() - at_) {
      fail_("ends after " + std::to_string(in_.size()) + " bytes, in the middle of a field of " + std::to_string(n) +
            " at byte " + std::to_string(at_) + " (truncated?)");
    }
    if (n > 0) std::memcpy(data, in_.data() + at_, n);
    at_ += n;
  }
  /// @return the next 32-bit integer.
  std::int32_t i32() {
    std::int32_t v = 0;
    bytes(&v, sizeof v);
    return v;
  }
  /// @return the next 64-bit integer.
  std::int64_t i64() {
    std::int64_t v = 0;
    bytes(&v, sizeof v);
    return v;
  }
  /// @brief Reads an i64 count of elements of `element` bytes, checked against what is left.
  /// @param[in] element the size of one element (>= 1).
  /// @return the count.
  std::int64_t length(std::size_t element) {
    const std::int64_t n = i64();
    if (n < 0 || static_cast<std::size_t>(n) > (in_.size() - at_) / element) {
      fail_("holds a length of " + std::to_string(n) + " that does not fit in the " +
            std::to_string(in_.size() - at_) + " bytes left (truncated or corrupt)");
    }
    return n;
  }
  /// @return the next string (ByteWriter::str's layout).
  std::string str() {
    std::string s(static_cast<std::size_t>(length(1)), '\0');
    bytes(s.data(), s.size());
    return s;
  }
  /// @return the next floats (ByteWriter::floats's layout).
  std::vector<float> floats() {
    std::vector<float> v(static_cast<std::size_t>(length(sizeof(float))));
    bytes(v.data(), v.size() * sizeof(float));
    return v;
  }
  /// @return whether every byte has been read.
  bool at_end() const noexcept { return at_ == in_.size(); }

 private:
  std::span<const std::byte> in_;
  Fail fail_;
  std::size_t at_;
};

}  // namespace dtl
