// Lab 06, given (not a task; compiled into both builds): the checkpoint file
// format, and how the ranks agree on success.
//
// What this file teaches: a file that another program (or another world size)
// will read must say what it is and prove it is whole. Each file is
//
//     magic (8 bytes: "DTLSHRD1" or "DTLMANI1")
//     fields, each int64 little-endian, strings as length + bytes,
//     float arrays as length + 4-byte floats
//     checksum: FNV-1a 64 of every byte above
//
// so a missing file, a file of another kind, a truncated file and a flipped
// bit are four different, named errors. A file is written to PATH.tmp and
// renamed to PATH at the end: a crash in the middle leaves the old checkpoint
// whole (rename is atomic within one file system). The file-format code lives
// here, once; what to put in a file and how to re-shard it is task D
// (src/checkpoint.cc). See Note [Sharded checkpoints] in lab06/fsdp.h.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "harness/bytes.h"
#include "harness/error.h"
#include "lab06/fsdp.h"

namespace dtl::lab06 {
namespace {

constexpr char kShardMagic[8] = {'D', 'T', 'L', 'S', 'H', 'R', 'D', '1'};
constexpr char kManifestMagic[8] = {'D', 'T', 'L', 'M', 'A', 'N', 'I', '1'};

std::uint64_t fnv1a(const std::uint8_t* data, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  return h;
}

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint file " + path + ": " + why + " [" + where_am_i() + "]");
}

// The fields are written and read by dtl::ByteWriter and dtl::ByteReader
// (harness/bytes.h); a short or corrupt read names the file.
ByteReader reader_of(const std::vector<std::uint8_t>& in, const std::string& path) {
  return ByteReader(std::as_bytes(std::span(in)), [path](const std::string& why) { fail(path, why); }, 8);
}

void write_framed(const std::string& path, const char (&magic)[8], const ByteWriter& body) {
  std::vector<std::uint8_t> out(magic, magic + 8);
  const auto* fields = reinterpret_cast<const std::uint8_t*>(body.data().data());
  out.insert(out.end(), fields, fields + body.data().size());
  const std::uint64_t sum = fnv1a(out.data(), out.size());
  const auto* s = reinterpret_cast<const std::uint8_t*>(&sum);
  out.insert(out.end(), s, s + sizeof sum);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail(path, "cannot be created (does the folder exist, is it writable?)");
  const bool written = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    fail(path, "could not be written completely (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, "could not be renamed into place");
  }
}

// The file's bytes after checking its magic and checksum (the checksum removed).
std::vector<std::uint8_t> read_framed(const std::string& path, const char (&magic)[8], const char* kind) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(path, "is missing (or unreadable)");
  std::vector<std::uint8_t> in;
  std::uint8_t chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) in.insert(in.end(), chunk, chunk + n);
  std::fclose(f);
  if (in.size() < 16 || std::memcmp(in.data(), magic, 8) != 0) {
    fail(path, std::string("is not a ") + kind + " (wrong magic or too short: " + std::to_string(in.size()) + " bytes)");
  }
  std::uint64_t stored = 0;
  std::memcpy(&stored, in.data() + in.size() - 8, 8);
  in.resize(in.size() - 8);
  if (fnv1a(in.data(), in.size()) != stored) fail(path, "is corrupt: its checksum does not match its contents");
  return in;
}

}  // namespace

std::string shard_file_path(const std::string& dir, int rank, int world_size) {
  return dir + "/shard-" + std::to_string(rank) + "-of-" + std::to_string(world_size) + ".dtl";
}

std::string manifest_path(const std::string& dir) { return dir + "/manifest.dtl"; }

void write_shard_file(const std::string& path, const ShardFile& file) {
  ByteWriter w;
  w.i64(file.rank);
  w.i64(file.world_size);
  w.i64(file.steps);
  w.str(file.optimizer);
  w.i64(static_cast<std::int64_t>(file.units.size()));
  for (const UnitShard& u : file.units) {
    w.str(u.name);
    w.i64(u.numel);
    w.floats(u.values);
    w.i64(static_cast<std::int64_t>(u.state.size()));
    for (const auto& s : u.state) w.floats(s);
  }
  write_framed(path, kShardMagic, w);
}

ShardFile read_shard_file(const std::string& path) {
  const std::vector<std::uint8_t> in = read_framed(path, kShardMagic, "shard file");
  ByteReader r = reader_of(in, path);
  ShardFile file;
  file.rank = static_cast<int>(r.i64());
  file.world_size = static_cast<int>(r.i64());
  file.steps = r.i64();
  file.optimizer = r.str();
  const std::int64_t units = r.length(1);
  for (std::int64_t i = 0; i < units; ++i) {
    UnitShard u;
    u.name = r.str();
    u.numel = r.i64();
    u.values = r.floats();
    const std::int64_t states = r.length(1);
    for (std::int64_t s = 0; s < states; ++s) u.state.push_back(r.floats());
    file.units.push_back(std::move(u));
  }
  return file;
}

void write_manifest(const std::string& path, const Manifest& manifest) {
  ByteWriter w;
  w.i64(manifest.world_size);
  w.i64(manifest.steps);
  w.str(manifest.optimizer);
  w.i64(static_cast<std::int64_t>(manifest.units.size()));
  for (std::size_t i = 0; i < manifest.units.size(); ++i) {
    w.str(manifest.units[i]);
    w.i64(i < manifest.numels.size() ? manifest.numels[i] : 0);
  }
  write_framed(path, kManifestMagic, w);
}

Manifest read_manifest(const std::string& path) {
  const std::vector<std::uint8_t> in = read_framed(path, kManifestMagic, "checkpoint manifest");
  ByteReader r = reader_of(in, path);
  Manifest m;
  m.world_size = static_cast<int>(r.i64());
  m.steps = r.i64();
  m.optimizer = r.str();
  const std::int64_t units = r.length(1);
  for (std::int64_t i = 0; i < units; ++i) {
    m.units.push_back(r.str());
    m.numels.push_back(r.i64());
  }
  if (m.world_size < 1) fail(path, "names a world size of " + std::to_string(m.world_size));
  return m;
}

void agree_or_throw(Communicator& backend, const std::string& error) {
  // Which ranks failed: one int per rank, summed (every rank knows the size in advance).
  const int size = backend.world_size();
  std::vector<std::int32_t> failed(static_cast<std::size_t>(size), 0);
  failed[static_cast<std::size_t>(backend.rank())] = error.empty() ? 0 : 1;
  backend.allreduce_blocking(std::span<std::int32_t>(failed), ReduceOp::kSum);
  int first = -1;
  for (int r = 0; r < size && first < 0; ++r) {
    if (failed[static_cast<std::size_t>(r)] != 0) first = r;
  }
  if (first < 0) return;
  // The first failing rank's message, to everyone: its length, then its bytes in int32 words.
  std::int32_t length = backend.rank() == first ? static_cast<std::int32_t>(error.size()) : 0;
  backend.broadcast_blocking(std::span<std::int32_t>(&length, 1), first);
  std::vector<std::int32_t> words((static_cast<std::size_t>(length) + 3) / 4, 0);
  if (backend.rank() == first) std::memcpy(words.data(), error.data(), error.size());
  backend.broadcast_blocking(std::span<std::int32_t>(words), first);
  std::string message(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(length));
  throw CheckpointError("rank " + std::to_string(first) + ": " + message);
}

}  // namespace dtl::lab06
