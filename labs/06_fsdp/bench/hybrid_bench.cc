// Lab 06 benchmark, task F: hybrid sharding swept over the group size G, against
// FSDP over all P ranks, on an emulated two-level network (dtl::TwoLevelLink:
// "nodes" of P/2 consecutive ranks on a fast link, the two nodes joined by a slow
// one; every communicator runs at the link of its slowest hop).
//
// Rows (run with 4 ranks: `mpirun -n 4 build/labs/06_fsdp/lab06_bench
// --benchmark_filter=Hybrid`; at 2 ranks the nodes are single ranks):
//   Hybrid/two-level/G=<g>   FSDP with prefetch 1 over a HybridCommunicator in groups
//                            of g (impl), paired with FSDP with prefetch 1 over all P
//                            ranks (the vendor column, "DDP (ms)" in the shared table
//                            header, is FSDP here); ratio = hybrid / FSDP per pair
// Both sides are emulated: the model is kUnits units of a Linear(256, 256) and a
// SleepLayer (forward 5 ms, backward 10 ms), as the graded row's; the links are
// kInside and kAcross (alpha-beta models: EMULATED times, not measured on such links).
// At the end rank 0 prints, per G: the most bytes any rank sent per step into
// collectives over the slow link (counted by a recording communicator on every
// communicator that spans nodes), their ratio to FSDP's and 1/G, and rank 0's peak
// parameter + gradient + optimizer bytes against Note [ZeRO stages] at W = G
// (prefetch 1; every rank holds the same).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/bench/sleep_layer.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/nn/memory.h"
#include "harness/nn/model.h"
#include "harness/random.h"
#include "harness/testing/recording_communicator.h"
#include "lab06/fsdp.h"
#include "lab06/hybrid.h"

namespace dtl::lab06::hybrid_bench {
namespace {

namespace nn = dtl::nn;
using dtl::bench::comm;
using dtl::testing::RecordingCommunicator;

constexpr int kUnits = 4;
constexpr std::int64_t kWidth = 256, kBatch = 8;
constexpr double kForwardSeconds = 5e-3, kBackwardSeconds = 10e-3;
constexpr const char* kInside = "alpha=20us,bw=250MB/s";  // inside a node: 10x the bandwidth
constexpr const char* kAcross = "alpha=100us,bw=25MB/s";  // between nodes: the graded row's link
const nn::AdamWOptions kAdamW{.lr = 1e-3f, .weight_decay = 0.0f};

/// Ranks per emulated node: P/2 for an even P (two nodes), else 1.
int node_size(int world_size) { return world_size % 2 == 0 ? world_size / 2 : 1; }

dtl::TwoLevelLink network(int world_size) {
  return {dtl::parse_link(kInside), dtl::parse_link(kAcross), node_size(world_size)};
}

/// One communicator of the sweep: the MPI ranks `members` (world ranks, split by
/// `color`, ordered by `key`), emulated at the link they need, recorded.
struct Level {
  dtl::Comm mpi;
  std::unique_ptr<dtl::Communicator> link;
  std::unique_ptr<RecordingCommunicator> record;
  bool crosses = false;  // runs on the slow link

  Level(int color, int key, const std::vector<int>& members) {
    const dtl::TwoLevelLink net = network(comm().size());
    mpi = dtl::Comm::split(comm(), color, key);
    crosses = members.size() > 1 && &net.link_for(members) == &net.across;
    link = std::make_unique<dtl::EmulatedCommunicator>(std::make_unique<dtl::MpiCommunicator>(mpi, dtl::MpiMode::kPolling),
                                                       net, members);
    record = std::make_unique<RecordingCommunicator>(*link);
  }
  /// The bytes of the recorded operations that crossed nodes (0 on the fast link).
  double crossed_bytes() const {
    double b = 0.0;
    if (crosses)
      for (const auto& op : record->ops()) b += static_cast<double>(op.bytes);
    return b;
  }
};

struct Data {
  nn::Tensor x, y;
};
Data make_data() {
  Data d;
  dtl::Rng rng(7 + static_cast<std::uint64_t>(comm().rank()));
  d.x = nn::Tensor::zeros({kBatch, kWidth}, nn::DType::kF32, nn::MemoryCategory::kActivations);
  d.y = nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kActivations);
  for (float& v : d.x.span<float>()) v = static_cast<float>(rng.normal());
  for (auto& v : d.y.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(kWidth));
  return d;
}

lab06::ShardedOptions fsdp_options() {
  lab06::ShardedOptions o;
  o.mode = lab06::ShardingMode::kFsdp;
  o.prefetch = 1;
  o.adamw = kAdamW;
  return o;
}

/// The model's parameter + gradient + optimizer bytes at their peaks (a step's, after
/// `before`), as the MemoryTracker counts them.
std::int64_t state_peak(const nn::MemorySnapshot& before) {
  using C = nn::MemoryCategory;
  std::int64_t sum = 0;
  for (C c : {C::kParameters, C::kGradients, C::kOptimizerState})
    sum += nn::memory_tracker().peak(c) - before.current[static_cast<int>(c)];
  return sum;
}

/// Note [ZeRO stages] for FSDP with prefetch k = 1 and AdamW at W = G: 4S + 4 W_1(L)
/// of parameters, as many of gradients, 8S of optimizer state; W_1 = the largest sum
/// of two consecutive units' padded sizes.
std::int64_t state_closed_form(const lab06::ShardedTrainer& t) {
  std::int64_t n = 0, window = 0;
  for (int u = 0; u < t.unit_count(); ++u) {
    n += t.unit(u).layout.padded;
    const std::int64_t next = u + 1 < t.unit_count() ? t.unit(u + 1).layout.padded : 0;
    window = std::max(window, t.unit(u).layout.padded + next);
  }
  const std::int64_t s = n / t.unit(0).layout.world_size;
  return 2 * (4 * s + 4 * window) + 8 * s;
}

struct Summary {
  int g = 1;
  double cross = 0.0, fsdp_cross = 0.0;  // bytes per rank and step over the slow link
  std::int64_t peak = 0, closed_form = 0, fsdp_peak = 0;
  double ratio = 0.0;
};
std::vector<Summary>& summaries() {
  static std::vector<Summary> s;
  return s;
}

void hybrid_row(benchmark::State& state, int g) {
  const int p = comm().size(), rank = comm().rank();
  const lab06::HybridGroups groups = lab06::make_hybrid_groups(p, rank, g);
  std::vector<int> everyone;
  for (int r = 0; r < p; ++r) everyone.push_back(r);
  Level world(0, rank, everyone);
  Level inside(groups.group, groups.group_rank, groups.group_members);
  Level across(groups.group_rank, groups.group, groups.replica_members);
  lab06::HybridCommunicator hybrid(*inside.record, *across.record, groups);
  const Data data = make_data();
  Summary sum;
  sum.g = g;

  // FSDP over all P, then hybrid in groups of g: each built, then its memory measured over one step.
  nn::MemorySnapshot before = nn::memory_tracker().snapshot();
  nn::Model fsdp_model = dtl::bench::sleep_model(kUnits, kWidth, kForwardSeconds, kBackwardSeconds, 11);
  lab06::ShardedTrainer fsdp(*world.record, fsdp_model, fsdp_options());
  nn::memory_tracker().reset_peak();
  fsdp.step(data.x, data.y);
  sum.fsdp_peak = state_peak(before);
  before = nn::memory_tracker().snapshot();
  nn::Model hybrid_model = dtl::bench::sleep_model(kUnits, kWidth, kForwardSeconds, kBackwardSeconds, 11);
  lab06::ShardedTrainer sharded(hybrid, hybrid_model, fsdp_options());
  nn::memory_tracker().reset_peak();
  sharded.step(data.x, data.y);
  sum.peak = state_peak(before);
  sum.closed_form = state_closed_form(sharded);

  for (Level* l : {&world, &inside, &across}) l->record->clear();
  std::vector<double> exposed;  // the hybrid step's waits for its gathers and reduce-scatters
  dtl::bench::PairedTimer timer;
  int steps = 0;
  for (auto _ : state) {
    double waited = 0.0;
    state.SetIterationTime(timer.time_pair([&] { waited = sharded.step(data.x, data.y).exposed_seconds; },
                                           [&] { fsdp.step(data.x, data.y); }));
    exposed.push_back(waited);
    ++steps;
  }
  // The most any rank sent over the slow link (at P = 6, G = 2 some groups span two nodes).
  double mine[2] = {(inside.crossed_bytes() + across.crossed_bytes()) / steps, world.crossed_bytes() / steps};
  double most[2] = {0.0, 0.0};
  DTL_MPI_CHECK(MPI_Allreduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, comm()));
  sum.cross = most[0];
  sum.fsdp_cross = most[1];
  sum.ratio = timer.ratio_median();
  state.counters["step_ms"] = timer.impl_median() * 1e3;
  state.counters["vendor_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = sum.ratio;
  state.counters["exposed_ms"] = dtl::bench::median(exposed) * 1e3;  // rank 0's
  summaries().push_back(sum);
}

void print_summary() {
  if (summaries().empty() || comm().rank() != 0) return;
  const int p = comm().size();
  std::printf("\n# Hybrid sharding at P = %d on an emulated two-level network: %s\n", p,
              network(p).describe().c_str());
  std::printf("# per step, the most of any rank; FSDP = FSDP over all %d ranks (prefetch 1 both); state = params + "
              "grads + AdamW at their peaks\n",
              p);
  std::printf("| G | replicas | crossing bytes | FSDP's | ratio | 1/G | state bytes | closed form at W = G | "
              "FSDP's state | step ratio |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Summary& s : summaries()) {
    const double ratio = s.fsdp_cross > 0 ? s.cross / s.fsdp_cross : 0.0;
    std::printf("| %d | %d | %.0f | %.0f | %.3f | %.3f | %lld | %lld | %lld | %.2f |\n", s.g, p / s.g, s.cross,
                s.fsdp_cross, ratio, 1.0 / s.g, static_cast<long long>(s.peak), static_cast<long long>(s.closed_form),
                static_cast<long long>(s.fsdp_peak), s.ratio);
  }
  std::fflush(stdout);
}

const bool registered = [] {
  dtl::bench::at_start([] {
    const int p = comm().size();
    for (int g = 1; g <= p; ++g) {
      if (p % g != 0) continue;
      benchmark::RegisterBenchmark(("Hybrid/two-level/G=" + std::to_string(g)).c_str(),
                                   [g](benchmark::State& state) { hybrid_row(state, g); })
          ->Iterations(dtl::bench::quick() ? 3 : 9)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  });
  dtl::bench::at_finish(print_summary);
  return true;
}();

}  // namespace
}  // namespace dtl::lab06::hybrid_bench
