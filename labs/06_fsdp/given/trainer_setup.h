// Lab 06, given (not a task): helpers of your files in src/ (sharded_trainer.cc,
// checkpoint.cc), defined in given/trainer_setup.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lab06/fsdp.h"

namespace dtl::lab06 {

/// Why `layout` does not describe a unit of parameters of `numels` sharded
/// `world_size` ways, or "" when it does.
std::string layout_mismatch(const FlatLayout& layout, const std::vector<std::int64_t>& numels, int world_size);

/// "sgd" or "adamw": the trainer's optimizer as a checkpoint names it.
const char* optimizer_name(const ShardedTrainer& trainer);

/// The optimizer state tensors of a unit, in the order they are stored: {momentum}, {m, v} or {}.
std::vector<nn::Tensor> state_tensors(const UnitState& st);

/// The elements of an f32 tensor, copied.
std::vector<float> to_vector(const nn::Tensor& t);

}  // namespace dtl::lab06
