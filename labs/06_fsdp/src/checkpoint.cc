// Lab 06, task D: sharded checkpoints — save each rank's shard, load on any
// world size by re-sharding, refuse a bad checkpoint without losing anything.
//
// What this file teaches: a sharded checkpoint is as distributed as the model.
// Saving is embarrassingly parallel (each rank writes what it owns); loading on
// W' ranks is a re-partition of each unit's real elements [0, numel) — task A's
// reshard_sources() says which old slices each new shard is made of — and the
// padding is never stored, because it is zero by construction. Saved at W = 4,
// loaded at W' = 2, unit of numel 10 (shards 3 -> 5):
//
//     old   r0: 0 1 2   r1: 3 4 5   r2: 6 7 8   r3: 9 . .
//     new   r0: 0 1 2 3 4           r1: 5 6 7 8 9
//           (old r0 [0,3), r1 [0,2))   (old r1 [2,3), r2 [0,3), r3 [0,1))
//
// Two rules make it safe. Check everything before changing anything: each rank
// reads and checks into buffers of its own, then the ranks agree
// (agree_or_throw()), and only if all succeeded does any rank touch its
// trainer. And every error names the file, the unit and the rank. See Note
// [Sharded checkpoints] in lab06/fsdp.h; the file format is given
// (given/shard_files.cc).
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab06/fsdp.h"

namespace dtl::lab06 {
namespace {

const char* optimizer_name(const ShardedTrainer& trainer) {
  return trainer.options().optimizer == OptimizerKind::kSgd ? "sgd" : "adamw";
}

// The optimizer state tensors of a unit, in the order they are stored: {momentum}, {m, v} or {}.
std::vector<nn::Tensor> state_tensors(const UnitState& st) {
  if (st.adamw) return {st.adamw->m(), st.adamw->v()};
  if (st.sgd && st.sgd->momentum().defined()) return {st.sgd->momentum()};
  return {};
}

std::vector<float> to_vector(const nn::Tensor& t) {
  const auto s = t.span<float>();
  return {s.begin(), s.end()};
}

}  // namespace

void save_checkpoint(ShardedTrainer& trainer, const std::string& dir) {
  Communicator& comm = trainer.comm();
  std::string error;
  // TODO(student): Inside a try (catch std::exception into `error`): fill a ShardFile (rank, world size,
  //   trainer.steps(), "sgd"/"adamw", and per unit its name, layout.numel, the shard's
  //   floats and the optimizer state's: AdamW {m, v}, SGD {momentum} when it has one);
  //   write_shard_file(shard_file_path(dir, rank, W), ...); rank 0 also write_manifest().
  //   Then agree_or_throw(comm, error) — on every rank, also when this rank failed.
  throw dtl::NotImplemented("save_checkpoint");
}

void load_checkpoint(ShardedTrainer& trainer, const std::string& dir) {
  Communicator& comm = trainer.comm();
  const int rank = comm.rank(), world = comm.world_size();
  std::string error;
  // TODO(student): 1. Inside a try (catch std::exception into `error`), touching nothing of the trainer:
  //      read_manifest(manifest_path(dir)); check its optimizer and its units (count, each
  //      name and numel) against the trainer's, naming the unit. For every unit, build new
  //      values and state (`shard` floats each, zero) from reshard_sources(numel, manifest
  //      world size, W, rank): read each old rank's file once (read_shard_file), check that it
  //      says that rank and world size and holds the unit with the same name and numel and
  //      enough floats, and copy the slices. Every message names the file or unit, and the rank.
  //   2. agree_or_throw(comm, error).
  //   3. Commit: copy into each unit's shard and optimizer state; trainer.set_steps(manifest
  //      steps); ZeRO-1/2: all-gather each unit's full_values in place (the shard is a view
  //      of it and the peers' parts changed too), and wait.
  throw dtl::NotImplemented("load_checkpoint");
}

}  // namespace dtl::lab06
