// What lab 06's tests share: the models at this lab's sizes (their kinds, batches and
// the comparison are every training lab's: harness/testing/training_fixtures.h,
// datasets/test_batches.h), the single-process fp32
// oracle, layouts and closed forms worked out here (not by the code under test),
// the vendor all-gather of the shards, the backends, and a scratch folder for
// checkpoints (the communicator that records what passes through it is
// harness/testing/recording_communicator.h).
//
// The equivalence the tests check: W ranks, each with B/W rows of a global batch
// of B, in any sharding mode, take the same steps as one process with all B rows
// (the oracle runs inside every rank, with harness/nn only). The parameters are
// compared after gathering every unit's shards with MPI_Allgather (the vendor
// collective, not the trainer's), cut to each unit's real elements.
//
// Tolerance, and why it is not zero: the oracle's gradient sums B rows in one
// GEMM; the sharded run sums B/W rows per rank and then the W partial means in
// the reduce-scatter. Float addition is not associative, so the two differ in
// the last bits (about 1e-7 relative per step); kSteps steps keep that size.
// A missing average is a factor W, a shard stepped twice or never, a stale
// gather or a wrong offset are O(1e-2) and more: far outside the tolerance.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_batches.h"
#include "datasets/test_data.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/nn/layers.h"
#include "harness/nn/memory.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/testing/early_wait.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/recording_communicator.h"
#include "harness/testing/training_fixtures.h"
#include "lab06/fsdp.h"

namespace lab06_test {

using dtl::testing::comm;
using dtl::testing::RecordingCommunicator;
namespace nn = dtl::nn;
namespace lab06 = dtl::lab06;

inline constexpr std::int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3, 4 and 6 (5: hidden tests use 10 or 20)
inline constexpr int kSteps = 3;
// |sharded - oracle| <= 2e-5 + 1e-4 |oracle|: dtl::testing::close_to()'s default Tolerance.

inline constexpr std::int64_t kChannels = 16;

// The shared fixtures (harness/testing/training_fixtures.h, datasets/test_batches.h);
// this lab sweeps kOddMlp and kGpt.
using dtl::testing::Batch;
using dtl::testing::bytes_of;
using dtl::testing::close_to;
using dtl::testing::ModelKind;
using dtl::testing::model_name;
using dtl::testing::opt_name;
using dtl::testing::OptKind;
using dtl::data::testing::corpus;  // datasets/test_data.h: the same rows in every lab's tests
using dtl::data::testing::kContext;
using dtl::data::testing::make_batch;
using dtl::data::testing::rank_batch;

// kOddMlp: units fc0, fc1, head of 21, 56 and 24 parameters (101 in all, a prime):
// at every W from 2 to 6 at least one unit is padded. kGpt: embed, block0, block1, head.
inline nn::Model make_model(ModelKind kind, std::uint64_t seed) {
  if (kind == ModelKind::kOddMlp) return nn::make_mlp(2, 7, 3, 2, seed);
  return nn::make_gpt(static_cast<std::int64_t>(corpus().vocab.size()), kContext, kChannels, 2, 2, seed);
}

inline const nn::SgdOptions kSgd{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f};
inline const nn::AdamWOptions kAdamW{.lr = 1e-3f, .weight_decay = 0.01f};

/// The oracle for any `model`: one process, fp32, the whole batch of `kind`'s data,
/// `steps` steps; the flat parameters (unpadded).
inline std::vector<float> single_process_of(nn::Model model, ModelKind kind, OptKind opt, int steps,
                                            std::int64_t global) {
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params);
  const nn::Tensor grads = nn::flatten_grads(params);
  nn::Sgd sgd(kSgd, values.numel());
  nn::AdamW adam(kAdamW, values.numel());
  nn::SoftmaxCrossEntropy ce;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, global, 0, global);
    model.zero_grad();
    ce.forward(model.forward(b.x), b.y);
    model.backward(ce.backward());
    if (opt == OptKind::kSgd) sgd.step(values.span<float>(), grads.span<float>());
    else adam.step(values.span<float>(), grads.span<float>());
  }
  const auto p = values.span<float>();
  return {p.begin(), p.end()};
}

/// The oracle of the lab's models: single_process_of() on make_model(kind, seed).
inline std::vector<float> single_process(ModelKind kind, OptKind opt, std::uint64_t seed, int steps = kSteps,
                                         std::int64_t global = kGlobalBatch) {
  return single_process_of(make_model(kind, seed), kind, opt, steps, global);
}

/// Each unit's parameter counts, read from the model.
inline std::vector<std::vector<std::int64_t>> unit_numels(nn::Model& model) {
  std::vector<std::vector<std::int64_t>> out;
  for (int u = 0; u < model.unit_count(); ++u) {
    out.emplace_back();
    for (const nn::Parameter* p : model.unit(u).parameters()) out.back().push_back(p->value.numel());
  }
  return out;
}

/// Note [FlatParameter]'s layouts worked out here, so that the tests of tasks B-D do
/// not depend on the student's make_flat_layout() (task A).
inline std::vector<lab06::FlatLayout> test_layouts(nn::Model& model, int world_size) {
  std::vector<lab06::FlatLayout> out;
  for (const auto& numels : unit_numels(model)) {
    lab06::FlatLayout l;
    l.world_size = world_size;
    l.numels = numels;
    for (const std::int64_t n : numels) {
      l.offsets.push_back(l.numel);
      l.numel += n;
    }
    l.shard = (l.numel + world_size - 1) / world_size;
    l.padded = l.shard * world_size;
    out.push_back(l);
  }
  return out;
}

/// The padded sizes the closed forms of Note [ZeRO stages] use: N (sum), L (largest).
struct Sizes {
  std::int64_t n = 0, largest = 0;
  std::vector<std::int64_t> padded;
};
inline Sizes sizes_of(const std::vector<lab06::FlatLayout>& layouts) {
  Sizes s;
  for (const auto& l : layouts) {
    s.n += l.padded;
    s.largest = std::max(s.largest, l.padded);
    s.padded.push_back(l.padded);
  }
  return s;
}

/// The most of `per_unit` held at once when 1 + k consecutive units are (the gather
/// and free schedule with prefetch k, Note [Prefetch and the rate limiter]): the
/// largest sum of a window of min(1 + k, n) consecutive elements. k = 0: the largest.
inline std::int64_t window_max(const std::vector<std::int64_t>& per_unit, int k) {
  const std::size_t n = per_unit.size(), w = std::min(n, static_cast<std::size_t>(k) + 1);
  std::int64_t best = 0;
  for (std::size_t i = 0; i + w <= n; ++i) {
    std::int64_t sum = 0;
    for (std::size_t j = i; j < i + w; ++j) sum += per_unit[j];
    best = std::max(best, sum);
  }
  return best;
}

inline lab06::ShardedOptions options_for(lab06::ShardingMode mode, OptKind opt, int prefetch,
                                         const std::vector<lab06::FlatLayout>& layouts) {
  lab06::ShardedOptions o;
  o.mode = mode;
  o.optimizer = opt == OptKind::kSgd ? lab06::OptimizerKind::kSgd : lab06::OptimizerKind::kAdamW;
  o.sgd = kSgd;
  o.adamw = kAdamW;
  o.prefetch = prefetch;
  o.layouts = layouts;
  return o;
}

/// Every unit's full values, gathered from the trainer's shards with MPI_Allgather
/// (the vendor collective) over `mpi_comm`, cut to the real elements, concatenated.
/// Collective over mpi_comm.
inline std::vector<float> gathered_parameters(const lab06::ShardedTrainer& trainer, MPI_Comm mpi_comm) {
  std::vector<float> out;
  int size = 1;
  MPI_Comm_size(mpi_comm, &size);
  for (int u = 0; u < trainer.unit_count(); ++u) {
    const lab06::UnitState& st = trainer.unit(u);
    const std::int64_t shard = st.shard.defined() ? st.shard.numel() : 0;
    std::vector<float> mine(static_cast<std::size_t>(shard));
    if (shard > 0) std::memcpy(mine.data(), st.shard.raw(), mine.size() * sizeof(float));
    std::vector<float> full(mine.size() * static_cast<std::size_t>(size));
    MPI_Allgather(mine.data(), static_cast<int>(shard), MPI_FLOAT, full.data(), static_cast<int>(shard), MPI_FLOAT,
                  mpi_comm);
    const auto numel = std::min<std::size_t>(full.size(), static_cast<std::size_t>(st.layout.numel));
    out.insert(out.end(), full.begin(), full.begin() + static_cast<std::ptrdiff_t>(numel));
  }
  return out;
}

/// Open MPI on a communication thread (the default backend of the tests).
inline std::unique_ptr<dtl::Communicator> mpi_backend(MPI_Comm parent) {
  return std::make_unique<dtl::MpiCommunicator>(parent, dtl::MpiMode::kThread);
}
/// The alpha-beta emulator over Open MPI: every operation takes at least `alpha`.
inline std::unique_ptr<dtl::Communicator> emulated_backend(MPI_Comm parent, const std::string& link) {
  return std::make_unique<dtl::EmulatedCommunicator>(mpi_backend(parent), dtl::parse_link(link));
}

/// The run that never stopped, of the resume tests: 2 * half steps of `kind` (seed 3)
/// over comm() with the options `options` gives for the model, saving a checkpoint in
/// `dir` after `half` steps; the gathered parameters at the end.
inline std::vector<float> run_saving_halfway(ModelKind kind, int half, const std::string& dir,
                                             const std::function<lab06::ShardedOptions(nn::Model&)>& options) {
  auto backend = mpi_backend(comm());
  nn::Model model = make_model(kind, 3);
  lab06::ShardedTrainer trainer(*backend, model, options(model));
  for (int step = 0; step < 2 * half; ++step) {
    if (step == half) lab06::save_checkpoint(trainer, dir);
    const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), comm().size());
    trainer.step(b.x, b.y);
  }
  return gathered_parameters(trainer, comm());
}

/// A folder for checkpoints, made by rank 0 under $TMPDIR (or /tmp) and shared with
/// every rank of comm(); removed (by rank 0, after a barrier) when it goes out of scope.
class ScratchDir {
 public:
  ScratchDir() {
    char buf[512] = {0};
    if (comm().rank() == 0) {
      const char* tmp = std::getenv("TMPDIR");
      std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
      std::string templ = base + "/dtl-lab06-XXXXXX";
      std::vector<char> name(templ.begin(), templ.end());
      name.push_back('\0');
      if (::mkdtemp(name.data()) != nullptr) std::snprintf(buf, sizeof buf, "%s", name.data());
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, comm());
    path_ = buf;
  }
  ~ScratchDir() {
    MPI_Barrier(comm());
    if (comm().rank() == 0 && !path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  /// A sub-folder (made by rank 0, then a barrier).
  std::string sub(const std::string& name) const {
    const std::string p = path_ + "/" + name;
    if (comm().rank() == 0) std::filesystem::create_directories(p);
    MPI_Barrier(comm());
    return p;
  }

 private:
  std::string path_;
};

/// The ranks [0, n) of comm() as their own communicator (MPI_COMM_NULL on the others).
/// Collective over comm().
class SubComm {
 public:
  explicit SubComm(int n) {
    MPI_Comm_split(comm(), comm().rank() < n ? 0 : MPI_UNDEFINED, comm().rank(), &comm_);
  }
  ~SubComm() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  SubComm(const SubComm&) = delete;
  SubComm& operator=(const SubComm&) = delete;
  bool member() const { return comm_ != MPI_COMM_NULL; }
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Note [Watching the prefetch]: a gather issued ahead helps only if it stays in
// flight while the unit before it computes. A trainer that issues 1 + k gathers in
// a hook and then waits for all of them there has 1 + k in flight for a moment
// (max_in_flight() counts them) and overlaps nothing. So GatherWatch sees, through
// the trainer's observer (called as each hook ends, before the unit computes),
// which all-gathers were waited for inside each pre_forward and pre_backward, a
// loop on test() until one finishes counting as a wait (Note [A spin is a wait]
// in harness/testing/early_wait.h): one, the hook's own unit's, at most. Waits
// in the other hooks come after a unit computed, and are not counted.

/// A Communicator between the trainer and its backend that names every pre_* hook in
/// which more than one all-gather was waited for (Note [Watching the prefetch]).
class GatherWatch final : public dtl::testing::WatchCommunicator {
 public:
  /// inner: the backend, which must outlive this.
  explicit GatherWatch(dtl::Communicator& inner) : WatchCommunicator(inner, "gather watch") {}

  /// The observer for ShardedOptions: closes each hook's record.
  std::function<void(const char*, int)> observer() {
    return [this](const char* phase, int u) {
      const std::string p = phase;
      if (p.rfind("pre_", 0) == 0 && waited_.size() > 1) {
        std::string units;
        for (std::size_t g : waited_) units += (units.empty() ? "" : ", ") + unit_name(g);
        problems.push_back(p + "(" + std::to_string(u) + "): " + std::to_string(waited_.size()) +
                           " all-gathers were waited for (or their test() polled until they finished) before unit " +
                           std::to_string(u) + " computed: those of " + units +
                           ". Only unit " + std::to_string(u) + "'s own is needed there; a gather issued ahead "
                           "must stay in flight while unit " + std::to_string(u) + " computes (nothing overlaps)");
      }
      waited_.clear();
    };
  }
  /// Names gathers by the unit whose full_values they land in (call once the trainer is made), and forgets.
  void watch(const lab06::ShardedTrainer& trainer) {
    trainer_ = &trainer;
    units_.clear();
    waited_.clear();
    problems.clear();
  }
  std::vector<std::string> problems;  // one sentence per pre_* hook that waited for more than its own gather

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void* send, void* recv, const dtl::OpInfo& info) override {
    int unit = -1;
    for (int v = 0; trainer_ != nullptr && v < trainer_->unit_count(); ++v) {
      if (trainer_->unit(v).full_values.raw() == recv) unit = v;
    }
    const std::size_t g = units_.size();
    units_.push_back(unit);
    return std::make_unique<dtl::testing::EarlyWaitWork>(inner().allgather(send, recv, info.count, info.dtype), info,
                                                         [] { return true; }, [this, g] { waited_.insert(g); });
  }

 private:
  std::string unit_name(std::size_t g) const {
    const int u = g < units_.size() ? units_[g] : -1;
    return u >= 0 ? "unit " + std::to_string(u) : "the step's all-gather " + std::to_string(g);
  }
  const lab06::ShardedTrainer* trainer_ = nullptr;
  std::vector<int> units_;      // per all-gather since watch(), in issue order: the unit it lands in (-1: none)
  std::set<std::size_t> waited_;  // all-gathers waited for since the last hook ended
};

}  // namespace lab06_test
