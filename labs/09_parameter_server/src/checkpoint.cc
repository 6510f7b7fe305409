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
  // TODO(student): Append this server's whole state to `out` (a dtl::ByteWriter, harness/bytes.h, returned
  //   below) in exactly the layout at the top of this file (after the magic, written above):
  //   the key range, W, the version, the consistency model, every clock and lost flag, the
  //   values, and each key's momentum buffer if it has one. restore() must read it back bit for bit (Note [Checkpoints],
  //   handout Task E).
  throw dtl::NotImplemented("ParameterServer::checkpoint");
  return out.take();
}

void ParameterServer::restore(std::span<const std::byte> bytes) {
  // A short read names `bytes`, the argument of restore() it came from.
  ByteReader in(bytes, [](const std::string& why) { throw_invalid_argument("ParameterServer::restore", "bytes", why); });
  char magic[8] = {};
  in.bytes(magic, sizeof magic);
  DTL_REQUIRE_ARG(std::memcmp(magic, kMagic, sizeof magic) == 0, "ParameterServer::restore", "bytes",
                  "do not start with the checkpoint's magic \"DTLPS09\"");
  // TODO(student): Read the layout at the top of this file back into this server: afterwards clocks, lost
  //   flags, version, values and momentum are exactly the checkpointed ones. Throw
  //   dtl::InvalidArgument naming "bytes" for a checkpoint of another key range, worker count
  //   or consistency model, a has-momentum flag that does not match this server's optimizer,
  //   too few bytes, or bytes left over (Note [Checkpoints], handout Task E).
  throw dtl::NotImplemented("ParameterServer::restore");
}

}  // namespace dtl::lab09
