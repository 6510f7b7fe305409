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
#include "trainer_setup.h"

namespace dtl::lab06 {
void save_checkpoint(ShardedTrainer& trainer, const std::string& dir) {
  Communicator& backend = trainer.backend();
  std::string error;
  // TODO(student): Write this rank's ShardFile (rank, world size, trainer.steps(), the optimizer's name,
  //   and per unit its name, numel, the shard's floats and the optimizer state's floats) to
  //   shard_file_path(dir, rank, W), and on rank 0 the manifest, with the given functions
  //   (Note [Sharded checkpoints], handout Task D). A failure on any rank must make EVERY
  //   rank throw the same error, none hang: catch here, then agree_or_throw(backend, error) on
  //   every rank.
  throw dtl::NotImplemented("save_checkpoint");
}

void load_checkpoint(ShardedTrainer& trainer, const std::string& dir) {
  Communicator& backend = trainer.backend();
  const int rank = backend.rank(), world = backend.world_size();
  std::string error;
  // TODO(student): Load a checkpoint saved at any world size W into this trainer at W' (Note [Sharded
  //   checkpoints], handout Task D): afterwards each unit's shard and optimizer state hold
  //   exactly the saved elements that this rank owns under the new layout (padding zero),
  //   steps() is the saved count, and the full values are consistent on every rank. Every
  //   problem (manifest and trainer disagree on optimizer or units; a missing, corrupt or
  //   mislabelled shard file; a unit with another name or numel) throws on EVERY rank
  //   (agree_or_throw) naming the file or unit and the rank, and leaves the trainer
  //   untouched: validate everything before changing anything. Read each old file once; fill
  //   host tensors in place (offload).
  throw dtl::NotImplemented("load_checkpoint");
}

}  // namespace dtl::lab06
