// Lab 06, given (not a task; compiled into both builds): what your files in src/
// lean on. The sharding modes' names, the check of a layout against its unit, the
// trainer's destructor, step count and timed waits, and the pieces of a unit's
// state a checkpoint holds.
#include "trainer_setup.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab06/fsdp.h"

namespace dtl::lab06 {

std::string layout_mismatch(const FlatLayout& layout, const std::vector<std::int64_t>& numels, int world_size) {
  if (layout.world_size != world_size) {
    return "is for world size " + std::to_string(layout.world_size) + ", the communicator has " +
           std::to_string(world_size);
  }
  if (layout.numels != numels) return "lists other parameter sizes than the unit's";
  std::int64_t numel = 0;
  for (const std::int64_t n : numels) numel += n;
  if (layout.numel != numel || layout.padded < numel || layout.padded % world_size != 0 ||
      layout.shard * world_size != layout.padded || layout.padded - numel >= world_size) {
    return "has numel " + std::to_string(layout.numel) + ", padded " + std::to_string(layout.padded) + ", shard " +
           std::to_string(layout.shard) + " for " + std::to_string(numel) + " elements";
  }
  return "";
}

const char* optimizer_name(const ShardedTrainer& trainer) {
  return trainer.options().optimizer == OptimizerKind::kSgd ? "sgd" : "adamw";
}

std::vector<nn::Tensor> state_tensors(const UnitState& st) {
  if (st.adamw) return {st.adamw->m(), st.adamw->v()};
  if (st.sgd && st.sgd->momentum().defined()) return {st.sgd->momentum()};
  return {};
}

std::vector<float> to_vector(const nn::Tensor& t) {
  const auto s = t.span<float>();
  return {s.begin(), s.end()};
}

const char* sharding_mode_name(ShardingMode mode) {
  switch (mode) {
    case ShardingMode::kZero1: return "zero1";
    case ShardingMode::kZero2: return "zero2";
    case ShardingMode::kFsdp: return "fsdp";
  }
  return "?";
}

ShardedTrainer::~ShardedTrainer() {
  model_.hooks() = {};
  for (UnitState& st : units_) {
    try {
      st.gather.wait();
      st.reduce.wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "~ShardedTrainer: unit '%s': %s\n", st.name.c_str(), e.what());
    }
  }
}

void ShardedTrainer::set_steps(std::int64_t steps) {
  DTL_REQUIRE_ARG(steps >= 0, "ShardedTrainer::set_steps", "steps", "is negative");
  steps_ = steps;
  for (UnitState& st : units_) {
    if (st.adamw) st.adamw->set_steps(steps);
  }
}

double ShardedTrainer::wait_timed(Work& work, const std::string& what) {
  const double begin = clock_seconds();
  work.wait();
  const double waited = clock_seconds() - begin;
  current_.exposed_seconds += waited;
  if (options_.timeline) options_.timeline->add_work("comm", work, what);
  return waited;
}

}  // namespace dtl::lab06
