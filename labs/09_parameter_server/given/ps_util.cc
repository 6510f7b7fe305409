// Lab 09, given (not a task; compiled into both builds): the group (roles, the
// communicator, options checked on every rank), the wire format, names, and the
// vector clock's constructor.
//
// What this file teaches: checks before communication. Every check below depends
// only on arguments every rank has, and all of them come before MPI_Comm_dup, so
// a bad option throws on every rank and no rank is left waiting in the duplicate.
#include <cstring>
#include <string>
#include <utility>

#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

const char* consistency_name(Consistency c) {
  switch (c) {
    case Consistency::kBsp: return "bsp";
    case Consistency::kSsp: return "ssp";
    case Consistency::kAsp: return "asp";
  }
  return "?";
}

PsGroup::PsGroup(MPI_Comm comm, PsOptions options, std::vector<std::int64_t> key_sizes, std::vector<int> bounds)
    : options_(options), key_sizes_(std::move(key_sizes)) {
  const auto [rank, size] = rank_and_size(comm);
  (void)rank;
  const int S = options_.servers;
  DTL_REQUIRE_ARG(size >= 2, "PsGroup", "servers",
                  "a parameter server needs at least 2 ranks (one server and one worker); this run has " +
                      std::to_string(size) + ". Run it with mpirun -n 2 or more");
  DTL_REQUIRE_ARG(S >= 1 && S < size, "PsGroup", "servers",
                  "is " + std::to_string(S) + "; with " + std::to_string(size) +
                      " ranks it must be in [1, " + std::to_string(size - 1) + "] so that a worker is left");
  DTL_REQUIRE_ARG(!key_sizes_.empty(), "PsGroup", "key_sizes", "is empty (a model with no parameter?)");
  for (std::size_t k = 0; k < key_sizes_.size(); ++k) {
    DTL_REQUIRE_ARG(key_sizes_[k] >= 1, "PsGroup", "key_sizes",
                    "key " + std::to_string(k) + " has " + std::to_string(key_sizes_[k]) + " elements (at least 1)");
  }
  DTL_REQUIRE_ARG(static_cast<std::size_t>(S) <= key_sizes_.size(), "PsGroup", "servers",
                  "is " + std::to_string(S) + " but there are only " + std::to_string(key_sizes_.size()) +
                      " keys: a server with no key has nothing to serve");
  DTL_REQUIRE_ARG(options_.staleness >= 0, "PsGroup", "staleness",
                  "is " + std::to_string(options_.staleness) + "; it must be >= 0");
  DTL_REQUIRE_ARG(options_.timeout_seconds > 0, "PsGroup", "timeout_seconds", "must be positive");
  if (bounds.empty()) bounds = shard_keys(key_sizes_, S);
  bool ok = bounds.size() == static_cast<std::size_t>(S) + 1 && bounds.front() == 0 &&
            bounds.back() == static_cast<int>(key_sizes_.size());
  for (std::size_t s = 0; ok && s + 1 < bounds.size(); ++s) ok = bounds[s] < bounds[s + 1];
  DTL_REQUIRE_ARG(ok, "PsGroup", "bounds",
                  "must be S + 1 = " + std::to_string(S + 1) + " strictly increasing key indices from 0 to " +
                      std::to_string(key_sizes_.size()));
  bounds_ = std::move(bounds);
  key_offsets_.assign(1, 0);
  for (std::int64_t n : key_sizes_) key_offsets_.push_back(key_offsets_.back() + n);
  comm_ = Comm(comm);  // our own matching context: no message of the caller's can match ours
}

// The wire format: int32 a, b, c, d; then the floats; then the text's bytes.
// Both ends run on the same machine type, so native byte order is fine.
std::vector<std::byte> encode(const Message& m) {
  const std::int32_t header[4] = {m.a, m.b, m.c, m.d};
  std::vector<std::byte> bytes(sizeof header + m.values.size() * sizeof(float) + m.text.size());
  std::memcpy(bytes.data(), header, sizeof header);
  if (!m.values.empty()) std::memcpy(bytes.data() + sizeof header, m.values.data(), m.values.size() * sizeof(float));
  if (!m.text.empty()) {
    std::memcpy(bytes.data() + sizeof header + m.values.size() * sizeof(float), m.text.data(), m.text.size());
  }
  return bytes;
}

Message decode(std::span<const std::byte> bytes, std::size_t floats) {
  constexpr std::size_t kHeader = 4 * sizeof(std::int32_t);
  DTL_REQUIRE_ARG(bytes.size() >= kHeader + floats * sizeof(float), "decode", "bytes",
                  "holds " + std::to_string(bytes.size()) + " bytes; a header and " + std::to_string(floats) +
                      " floats need " + std::to_string(kHeader + floats * sizeof(float)));
  Message m;
  std::int32_t header[4];
  std::memcpy(header, bytes.data(), kHeader);
  m.a = header[0];
  m.b = header[1];
  m.c = header[2];
  m.d = header[3];
  m.values.resize(floats);
  if (floats > 0) std::memcpy(m.values.data(), bytes.data() + kHeader, floats * sizeof(float));
  const std::size_t text = bytes.size() - kHeader - floats * sizeof(float);
  m.text.assign(reinterpret_cast<const char*>(bytes.data() + kHeader + floats * sizeof(float)), text);
  return m;
}

VectorClock::VectorClock(int workers) {
  DTL_REQUIRE_ARG(workers >= 1, "VectorClock", "workers", "is " + std::to_string(workers) + "; at least 1");
  clocks_.assign(static_cast<std::size_t>(workers), 0);
  lost_.assign(static_cast<std::size_t>(workers), false);
}

}  // namespace dtl::lab09
