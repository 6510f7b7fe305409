// Task D: sharded checkpoints. Saved at W = comm().size(), loaded at every W' from 1
// to W (the ranks [0, W') of the test's communicator), the new shards must hold the
// closed-form values the test wrote into the old ones (padding zero); a resumed run
// must equal the run that never stopped — bit for bit at the same W, within the
// tolerance of one process at another; and a bad checkpoint is refused on every rank,
// naming the file, the unit and the rank, with the trainer's state left untouched.
//
// The trainers are given their layouts (fsdp_test_util.h), and the shards and
// optimizer state are written by the test itself, so the re-sharding items depend
// on task B's constructor only, not on the training step.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;

// The closed-form contents: element e (of the unit's real elements) of state s
// (0 values, 1.. the optimizer's) of unit u. Exactly representable floats.
float pattern(int u, std::int64_t e, int s) { return static_cast<float>(u * 4096 + e) * 0.25f + static_cast<float>(s) * 0.125f; }

std::vector<nn::Tensor> state_of(const lab06::UnitState& st) {
  if (st.adamw) return {st.adamw->m(), st.adamw->v()};
  if (st.sgd && st.sgd->momentum().defined()) return {st.sgd->momentum()};
  return {};
}

/// Writes the pattern into this rank's shards and optimizer state (padding: zero).
void fill_pattern(lab06::ShardedTrainer& trainer, int rank) {
  for (int u = 0; u < trainer.unit_count(); ++u) {
    lab06::UnitState& st = trainer.unit(u);
    std::vector<nn::Tensor> tensors = {st.shard};
    for (const nn::Tensor& t : state_of(st)) tensors.push_back(t);
    for (std::size_t s = 0; s < tensors.size(); ++s) {
      float* p = tensors[s].data<float>();
      for (std::int64_t i = 0; i < st.layout.shard; ++i) {
        const std::int64_t e = rank * st.layout.shard + i;
        p[i] = e < st.layout.numel ? pattern(u, e, static_cast<int>(s)) : 0.0f;
      }
    }
  }
}

/// Whether this rank's shards and state hold the pattern; the first difference otherwise.
::testing::AssertionResult holds_pattern(const lab06::ShardedTrainer& trainer, int rank, const std::string& what) {
  for (int u = 0; u < trainer.unit_count(); ++u) {
    const lab06::UnitState& st = trainer.unit(u);
    std::vector<nn::Tensor> tensors = {st.shard};
    for (const nn::Tensor& t : state_of(st)) tensors.push_back(t);
    for (std::size_t s = 0; s < tensors.size(); ++s) {
      const float* p = tensors[s].data<float>();
      for (std::int64_t i = 0; i < st.layout.shard; ++i) {
        const std::int64_t e = rank * st.layout.shard + i;
        const float want = e < st.layout.numel ? pattern(u, e, static_cast<int>(s)) : 0.0f;
        if (p[i] != want) {
          return ::testing::AssertionFailure()
                 << what << ", rank " << rank << ": unit " << u << " ('" << st.name << "'), "
                 << (s == 0 ? std::string("values") : "optimizer state " + std::to_string(s)) << ", shard element " << i
                 << " (unit element " << e << ") is " << p[i] << ", expected " << want
                 << (e >= st.layout.numel ? " (padding)" : "");
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct ReshardCase {
  ShardingMode mode;
  OptKind opt;
};
class Reshard : public ::testing::TestWithParam<ReshardCase> {};

// Save at W, load at every W' in 1..W: each new shard is the closed form, the step count
// comes back, and (ZeRO-1/2) the full parameters are whole again on every rank.
TEST_P(Reshard, LoadsAtEveryWorldSize) {
  const ReshardCase c = GetParam();
  ScratchDir dir;
  {
    auto backend = mpi_backend(comm());
    nn::Model model = make_model(ModelKind::kGpt, 1);
    lab06::ShardedTrainer trainer(*backend, model, options_for(c.mode, c.opt, 0, test_layouts(model, comm().size())));
    fill_pattern(trainer, comm().rank());
    trainer.set_steps(7);
    lab06::save_checkpoint(trainer, dir.path());
  }
  for (int w2 = 1; w2 <= comm().size(); ++w2) {
    SubComm sub(w2);
    if (!sub.member()) continue;
    auto backend = mpi_backend(sub.get());
    nn::Model model = make_model(ModelKind::kGpt, 2);  // other initial values: the load must overwrite them
    lab06::ShardedTrainer trainer(*backend, model, options_for(c.mode, c.opt, 0, test_layouts(model, w2)));
    lab06::load_checkpoint(trainer, dir.path());
    const std::string what = "saved at W = " + std::to_string(comm().size()) + ", loaded at W' = " + std::to_string(w2);
    EXPECT_TRUE(holds_pattern(trainer, backend->rank(), what));
    EXPECT_EQ(trainer.steps(), 7) << what;
    if (c.mode != ShardingMode::kFsdp) {
      // The full values every rank's forward reads: the whole unit, from every shard.
      for (int u = 0; u < trainer.unit_count(); ++u) {
        const lab06::UnitState& st = trainer.unit(u);
        const float* p = st.full_values.data<float>();
        std::int64_t bad = -1;
        for (std::int64_t e = 0; e < st.layout.numel && bad < 0; ++e) bad = p[e] == pattern(u, e, 0) ? -1 : e;
        EXPECT_EQ(bad, -1) << what << ", rank " << backend->rank() << ": full values of unit '" << st.name
                           << "' differ at element " << bad << " after the load (were the peers' parts gathered?)";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Reshard,
                         ::testing::Values(ReshardCase{ShardingMode::kFsdp, OptKind::kAdamW},
                                           ReshardCase{ShardingMode::kFsdp, OptKind::kSgd},
                                           ReshardCase{ShardingMode::kZero1, OptKind::kAdamW},
                                           ReshardCase{ShardingMode::kZero2, OptKind::kSgd}),
                         [](const auto& p) {
                           return std::string(lab06::sharding_mode_name(p.param.mode)) + "_" + opt_name(p.param.opt);
                         });

// Train 2 steps at W, save, train 2 more: the run that never stopped. Load at W' and
// train the same 2 steps (the global batch split W' ways): at W' = W bit for bit the
// same parameters; at every W' within the tolerance of one process's 4 steps.
TEST(Resume, EqualsNeverStopping) {
  constexpr int kHalf = 2;
  const ModelKind kind = ModelKind::kOddMlp;
  ScratchDir dir;
  const std::vector<float> never_stopped = run_saving_halfway(kind, kHalf, dir.path(), [](nn::Model& model) {
    return options_for(ShardingMode::kFsdp, OptKind::kAdamW, 1, test_layouts(model, comm().size()));
  });
  const std::vector<float> oracle = single_process(kind, OptKind::kAdamW, 3, 2 * kHalf);
  for (int w2 = 1; w2 <= comm().size(); ++w2) {
    SubComm sub(w2);
    if (!sub.member()) continue;
    auto backend = mpi_backend(sub.get());
    nn::Model model = make_model(kind, 99);
    lab06::ShardedTrainer trainer(*backend, model,
                                  options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, w2)));
    lab06::load_checkpoint(trainer, dir.path());
    for (int step = kHalf; step < 2 * kHalf; ++step) {
      const Batch b = rank_batch(kind, step, kGlobalBatch, backend->rank(), w2);
      trainer.step(b.x, b.y);
    }
    const std::vector<float> got = gathered_parameters(trainer, sub.get());
    const std::string what = "saved at W = " + std::to_string(comm().size()) + ", resumed at W' = " + std::to_string(w2);
    EXPECT_TRUE(close_to(oracle, got, what));
    if (w2 == comm().size()) {
      EXPECT_TRUE(got == never_stopped) << what << ": rank " << comm().rank()
                                        << ": not bit-identical to the run that never stopped";
    }
  }
}

// ---------------------------------------------------------------------------
// Bad checkpoints
// ---------------------------------------------------------------------------

/// Saves a pattern checkpoint of `model_kind` at W = comm().size() into a new sub-folder.
std::string save_pattern(const ScratchDir& dir, const std::string& name) {
  const std::string path = dir.sub(name);
  auto backend = mpi_backend(comm());
  nn::Model model = make_model(ModelKind::kOddMlp, 1);
  lab06::ShardedTrainer trainer(*backend, model,
                                options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, comm().size())));
  fill_pattern(trainer, comm().rank());
  lab06::save_checkpoint(trainer, path);
  return path;
}

/// Loads `path` into a fresh trainer of `model`; the error message (every rank must
/// throw CheckpointError), and whether the trainer's shards and state kept every bit.
struct LoadOutcome {
  std::string error;
  bool unchanged = false;
};
LoadOutcome try_load(const std::string& path, nn::Model model) {
  auto backend = mpi_backend(comm());
  lab06::ShardedTrainer trainer(*backend, model,
                                options_for(ShardingMode::kFsdp, OptKind::kAdamW, 0, test_layouts(model, comm().size())));
  std::vector<std::vector<std::uint8_t>> before;
  for (int u = 0; u < trainer.unit_count(); ++u) {
    before.push_back(bytes_of(trainer.unit(u).shard));
    before.push_back(bytes_of(trainer.unit(u).adamw->m()));
  }
  LoadOutcome out;
  try {
    lab06::load_checkpoint(trainer, path);
    out.error = "no exception";
  } catch (const lab06::CheckpointError& e) {
    out.error = e.what();
  } catch (const std::exception& e) {
    out.error = std::string("not a CheckpointError: ") + e.what();
  }
  std::vector<std::vector<std::uint8_t>> after;
  for (int u = 0; u < trainer.unit_count(); ++u) {
    after.push_back(bytes_of(trainer.unit(u).shard));
    after.push_back(bytes_of(trainer.unit(u).adamw->m()));
  }
  out.unchanged = before == after && trainer.steps() == 0;
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CheckpointErrors, CorruptShardIsNamedAndNothingChanges) {
  ScratchDir dir;
  const std::string path = save_pattern(dir, "corrupt");
  const int last = comm().size() - 1;
  const std::string victim = lab06::shard_file_path(path, last, comm().size());
  if (comm().rank() == 0) {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(40);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(40);
    f.write(&c, 1);
  }
  MPI_Barrier(comm());
  const LoadOutcome o = try_load(path, make_model(ModelKind::kOddMlp, 2));
  const std::string file = "shard-" + std::to_string(last) + "-of-" + std::to_string(comm().size()) + ".dtl";
  EXPECT_TRUE(contains(o.error, file) && contains(o.error, "corrupt") && contains(o.error, "rank"))
      << "rank " << comm().rank() << ": the error should name the file " << file << ", say it is corrupt and name the rank: "
      << o.error;
  EXPECT_TRUE(o.unchanged) << "rank " << comm().rank() << ": a failed load changed the trainer";
}

TEST(CheckpointErrors, MissingShardIsNamedAndNothingChanges) {
  ScratchDir dir;
  const std::string path = save_pattern(dir, "missing");
  const std::string victim = lab06::shard_file_path(path, 0, comm().size());
  if (comm().rank() == 0) std::filesystem::remove(victim);
  MPI_Barrier(comm());
  const LoadOutcome o = try_load(path, make_model(ModelKind::kOddMlp, 2));
  EXPECT_TRUE(contains(o.error, "shard-0-of-") && contains(o.error, "missing") && contains(o.error, "rank"))
      << "rank " << comm().rank() << ": " << o.error;
  EXPECT_TRUE(o.unchanged) << "rank " << comm().rank() << ": a failed load changed the trainer";
}

// A shard file that claims another world size than the manifest's (a file from
// another save dropped into the folder): named, with both world sizes.
TEST(CheckpointErrors, ShardFromAnotherWorldSizeIsNamed) {
  ScratchDir dir;
  const std::string path = save_pattern(dir, "mixed");
  const int w = comm().size();
  if (comm().rank() == 0) {
    lab06::ShardFile f = lab06::read_shard_file(lab06::shard_file_path(path, 0, w));
    f.world_size = w + 1;
    lab06::write_shard_file(lab06::shard_file_path(path, 0, w), f);
  }
  MPI_Barrier(comm());
  const LoadOutcome o = try_load(path, make_model(ModelKind::kOddMlp, 2));
  EXPECT_TRUE(contains(o.error, "shard-0-of-" + std::to_string(w)) && contains(o.error, std::to_string(w + 1)))
      << "rank " << comm().rank() << ": the error should name the file and the world size it claims: " << o.error;
  EXPECT_TRUE(o.unchanged) << "rank " << comm().rank() << ": a failed load changed the trainer";
}

// A checkpoint of another model (the MLP with 8 hidden units instead of 7): named by unit.
TEST(CheckpointErrors, OtherModelIsNamedByUnit) {
  ScratchDir dir;
  const std::string path = save_pattern(dir, "other");
  const LoadOutcome o = try_load(path, nn::make_mlp(2, 8, 3, 2, 1));
  EXPECT_TRUE(contains(o.error, "fc0") && contains(o.error, "21") && contains(o.error, "24"))
      << "rank " << comm().rank() << ": the error should name unit fc0 and both sizes (21, 24): " << o.error;
  EXPECT_TRUE(o.unchanged) << "rank " << comm().rank() << ": a failed load changed the trainer";
}

}  // namespace
}  // namespace lab06_test
