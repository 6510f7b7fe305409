// Lab 09, task E: a server's state as bytes, and back.
//
// What this file teaches: what "the state" of a parameter server is. Values
// alone are not enough: with momentum, the optimizer's buffer decides the next
// steps as much as the weights do, and the vector clock and version decide
// which pulls may be answered. The layout (native byte order, one machine):
//
//     "DTLPS09"\0                       8 bytes, the magic
//     first_key end_key workers version consistency      int32 each
//     clocks[W]  lost[W]                int32 each
//     values[n]                         float, n = our range's elements
//     per key: has_momentum (int32), then its momentum (float) if it has one
//
// See Note [Checkpoints] in lab09/parameter_server.h.
#include <cstring>
#include <string>
#include <vector>

#include "harness/bytes.h"
#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'L', 'P', 'S', '0', '9', '\0'};

}  // namespace

std::vector<std::byte> ParameterServer::checkpoint() const {
  DTL_REQUIRE_ARG(deferred_.empty() && pending_.empty(), "ParameterServer::checkpoint", "this",
                  "has steps in flight; checkpoint between runs, when every step is applied");
  ByteWriter out;
  out.bytes(kMagic, sizeof kMagic);
  // BEGIN SOLUTION(ParameterServer::checkpoint)
  // | Append this server's whole state to `out` (a dtl::ByteWriter, harness/bytes.h, returned
  // | below) in exactly the layout at the top of this file (after the magic, written above):
  // | the key range, W, the version, the consistency model, every clock and lost flag, the
  // | values, and each key's momentum buffer if it has one. restore() must read it back bit for bit (Note [Checkpoints],
  // | handout Task E).
  const std::int32_t header[5] = {first_key_, end_key_, clock_.workers(), version_,
                                  static_cast<std::int32_t>(group_->options().consistency)};
  out.bytes(header, sizeof header);
  for (int w = 0; w < clock_.workers(); ++w) {
    const std::int32_t c = clock_.at(w);
    out.i32(c);
  }
  for (int w = 0; w < clock_.workers(); ++w) {
    const std::int32_t lost = clock_.live(w) ? 0 : 1;
    out.i32(lost);
  }
  out.bytes(values_.data(), values_.size() * sizeof(float));
  for (const nn::Sgd& sgd : sgd_) {
    const std::int32_t has = sgd.momentum().defined() ? 1 : 0;
    out.i32(has);
    if (has) out.bytes(sgd.momentum().data<float>(), static_cast<std::size_t>(sgd.momentum().numel()) * sizeof(float));
  }
  // END SOLUTION
  return out.take();
}

void ParameterServer::restore(std::span<const std::byte> bytes) {
  // A short read names `bytes`, the argument of restore() it came from.
  ByteReader in(bytes, [](const std::string& why) { throw_invalid_argument("ParameterServer::restore", "bytes", why); });
  char magic[8] = {};
  in.bytes(magic, sizeof magic);
  DTL_REQUIRE_ARG(std::memcmp(magic, kMagic, sizeof magic) == 0, "ParameterServer::restore", "bytes",
                  "do not start with the checkpoint's magic \"DTLPS09\"");
  // BEGIN SOLUTION(ParameterServer::restore)
  // | Read the layout at the top of this file back into this server: afterwards clocks, lost
  // | flags, version, values and momentum are exactly the checkpointed ones. Throw
  // | dtl::InvalidArgument naming "bytes" for a checkpoint of another key range, worker count
  // | or consistency model, a has-momentum flag that does not match this server's optimizer,
  // | too few bytes, or bytes left over (Note [Checkpoints], handout Task E).
  const std::int32_t first = in.i32(), end = in.i32(), workers = in.i32(), version = in.i32(),
                     consistency = in.i32();
  DTL_REQUIRE_ARG(first == first_key_ && end == end_key_ && workers == clock_.workers() &&
                      consistency == static_cast<std::int32_t>(group_->options().consistency),
                  "ParameterServer::restore", "bytes",
                  "are a checkpoint of keys [" + std::to_string(first) + ", " + std::to_string(end) + "), " +
                      std::to_string(workers) + " workers, consistency " + std::to_string(consistency) +
                      "; this server holds keys [" + std::to_string(first_key_) + ", " + std::to_string(end_key_) +
                      ") for " + std::to_string(clock_.workers()) + " workers, consistency " +
                      consistency_name(group_->options().consistency));
  std::vector<int> clocks(static_cast<std::size_t>(workers));
  std::vector<bool> lost(static_cast<std::size_t>(workers));
  for (int& c : clocks) c = in.i32();
  for (std::size_t w = 0; w < lost.size(); ++w) lost[w] = in.i32() != 0;
  std::vector<float> values(values_.size());
  in.bytes(values.data(), values.size() * sizeof(float));
  for (nn::Sgd& sgd : sgd_) {
    const bool has = in.i32() != 0;
    DTL_REQUIRE_ARG(has == sgd.momentum().defined(), "ParameterServer::restore", "bytes",
                    std::string("hold ") + (has ? "a" : "no") + " momentum where this server's optimizer has " +
                        (has ? "none" : "one"));
    if (has) in.bytes(sgd.momentum().data<float>(), static_cast<std::size_t>(sgd.momentum().numel()) * sizeof(float));
  }
  DTL_REQUIRE_ARG(in.at_end(), "ParameterServer::restore", "bytes", "go on after the checkpoint's end");
  clock_.assign(std::move(clocks), std::move(lost));
  version_ = version;
  values_ = std::move(values);
  // END SOLUTION
}

}  // namespace dtl::lab09
