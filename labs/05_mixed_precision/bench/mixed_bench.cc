// Lab 05 benchmark: what 16-bit gradients buy in communication, and what a
// mixed-precision step costs on this machine; memory per category; the loss
// scale of a real fp16 run.
//
// Rows (2 ranks by default; `./dtl bench 05 -n 4` for more). Each pairs the
// 16-bit version (impl) with fp32 through the same backend (vendor column:
// Open MPI's MPI_Allreduce with MPI_SUM), median per pair:
//   Comm/<backend>/<f16|bf16> <pre|post>  allreduce_mean_half() of kCommCount
//                     elements beside an fp32 averaging allreduce of as many floats;
//                     err = max |result - exact f64 average| / max |exact average|
//   Step/<backend>/<fp16|bf16>  one MixedPrecisionTrainer::step() (dynamic scaling
//                     for fp16, none for bf16) beside the fp32 trainer's step,
//                     with the gradient-averaging time of each (comm) and its ratio
// backends: "mpi-half" (real shared memory: HalfSumCommunicator, 16-bit sums in
// your reduce_half_sum() as an MPI user op) and "emulated 10GbE" / "emulated 1GbE"
// (EmulatedCommunicator over mpi-half: the reduction is real, the time is the
// alpha-beta model's — EMULATED, not measured on such a link).
//
// After the rows, rank 0 prints the memory per category of the three precisions
// (harness/nn's MemoryTracker) and runs fp16 with dynamic loss scaling on the
// spirals for kTrajectorySteps steps, writing each step's scale, skip flag and
// loss to lab05_scale_trajectory.csv in $DTL_TRACE_OUT (./dtl bench sets
// build/bench-out), from which slides/05_mixed_precision/make_figures.py draws.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "harness/bench/bench.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi.h"
#include "harness/error.h"
#include "harness/nn/half.h"
#include "harness/nn/memory.h"
#include "harness/nn/model.h"
#include "harness/random.h"
#include "lab05/mixed.h"

namespace {

namespace nn = dtl::nn;
namespace lab05 = dtl::lab05;
using dtl::bench::comm;

constexpr std::int64_t kIn = 256, kHidden = 512, kClasses = 10;
constexpr int kDepth = 3;
constexpr std::int64_t kBatch = 32;                // rows per rank
constexpr std::size_t kCommCount = std::size_t{1} << 20;  // elements of a Comm row
constexpr int kTrajectorySteps = 1500;

std::string backend_spec(const std::string& label) { return label == "mpi-half" ? label : "emulated:" + label; }

dtl::Communicator& backend(const std::string& label) {
  static std::vector<std::pair<std::string, std::unique_ptr<dtl::Communicator>>> made;
  for (auto& [name, c] : made) {
    if (name == label) return *c;
  }
  made.emplace_back(label, lab05::make_communicator(backend_spec(label), comm()));
  return *made.back().second;
}

double slowest(double seconds) {
  double out = 0.0;
  DTL_MPI_CHECK(MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, comm()));
  return out;
}

void add(const std::string& name, std::function<void(benchmark::State&)> fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
      ->Iterations(dtl::bench::quick() ? 4 : 12)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// Gradient-like data: N(0, 1) times 2^(rank - 4), different per rank.
std::vector<float> gradients(std::size_t n, int rank) {
  dtl::Rng rng(100 + static_cast<std::uint64_t>(rank));
  std::vector<float> g(n);
  for (float& v : g) v = static_cast<float>(rng.normal()) * std::ldexp(1.0f, rank - 4);
  return g;
}

void comm_row(benchmark::State& state, const std::string& label, dtl::DType dtype, lab05::DividePlacement where) {
  dtl::Communicator& c = backend(label);
  const std::vector<float> mine = gradients(kCommCount, c.rank());
  // The exact average, in double, for the error column.
  std::vector<double> exact(kCommCount, 0.0);
  for (int r = 0; r < c.world_size(); ++r) {
    const std::vector<float> theirs = gradients(kCommCount, r);
    for (std::size_t i = 0; i < kCommCount; ++i) exact[i] += theirs[i] / static_cast<double>(c.world_size());
  }
  std::vector<std::uint16_t> half(kCommCount);
  std::vector<float> f32(kCommCount);
  auto load_half = [&] {
    for (std::size_t i = 0; i < kCommCount; ++i) {
      half[i] = dtype == dtl::DType::kF16 ? nn::float_to_f16_bits(mine[i]) : nn::float_to_bf16_bits(mine[i]);
    }
  };
  dtl::bench::PairedTimer timer;
  for (auto _ : state) {
    load_half();
    f32 = mine;
    state.SetIterationTime(timer.time_pair(
        [&] { lab05::allreduce_mean_half(c, half.data(), kCommCount, dtype, where); },
        [&] { c.allreduce(f32.data(), kCommCount, dtl::DType::kF32, dtl::ReduceOp::kAvg).wait(); }));
  }
  double worst = 0.0, top = 0.0;
  for (std::size_t i = 0; i < kCommCount; ++i) {
    const double got = dtype == dtl::DType::kF16 ? nn::f16_bits_to_float(half[i]) : nn::bf16_bits_to_float(half[i]);
    worst = std::max(worst, std::abs(got - exact[i]));
    top = std::max(top, std::abs(exact[i]));
  }
  state.counters["impl_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["comm_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_comm_ms"] = timer.vendor_median() * 1e3;
  state.counters["comm_ratio"] = timer.ratio_median();
  state.counters["bytes"] = static_cast<double>(kCommCount * 2);
  state.counters["err"] = std::isfinite(worst) ? worst / top : INFINITY;
}

// One rank's trainer: model, trainer, batch.
struct Run {
  nn::Model model;
  std::unique_ptr<lab05::MixedPrecisionTrainer> trainer;
  nn::Tensor x, y;
  lab05::StepResult last;

  Run(dtl::Communicator& c, lab05::Precision p) : model(nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1)) {
    lab05::MixedOptions o;
    o.precision = p;
    o.scaler = p == lab05::Precision::kF16 ? lab05::LossScalerOptions{.mode = lab05::ScalingMode::kDynamic}
                                           : lab05::LossScalerOptions{.mode = lab05::ScalingMode::kNone};
    trainer = std::make_unique<lab05::MixedPrecisionTrainer>(c, model, o);
    dtl::Rng rng(7 + static_cast<std::uint64_t>(c.rank()));
    x = nn::Tensor::zeros({kBatch, kIn}, nn::DType::kF32, nn::MemoryCategory::kOther);
    y = nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kOther);
    for (float& v : x.span<float>()) v = static_cast<float>(rng.normal());
    for (auto& v : y.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(kClasses));
  }
  void step() { last = trainer->step(x, y); }
};

void step_row(benchmark::State& state, const std::string& label, lab05::Precision p) {
  dtl::Communicator& c = backend(label);
  Run impl(c, p), fp32(c, lab05::Precision::kF32);
  impl.step();  // warm-up (and, for fp16, the first scale)
  fp32.step();
  dtl::bench::PairedTimer timer;
  std::vector<double> comm_impl, comm_fp32, ratios;
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair([&] { impl.step(); }, [&] { fp32.step(); }));
    const double a = slowest(impl.last.comm_seconds), b = slowest(fp32.last.comm_seconds);
    comm_impl.push_back(a);
    comm_fp32.push_back(b);
    ratios.push_back(b > 0 ? a / b : 0.0);
  }
  state.counters["impl_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["comm_ms"] = dtl::bench::median(comm_impl) * 1e3;
  state.counters["fp32_comm_ms"] = dtl::bench::median(comm_fp32) * 1e3;
  state.counters["comm_ratio"] = dtl::bench::median(ratios);
  state.counters["bytes"] = static_cast<double>(impl.last.comm_bytes);
  state.counters["err"] = 0.0;
}

void register_rows() {
  const std::int64_t params = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1).parameter_count();
  if (comm().rank() == 0) {
    std::printf("# %d ranks. Comm rows: %zu elements (fp32 %s, 16-bit %s). Step rows: MLP in %lld, hidden %lld x %d, "
                "%lld classes, %lld parameters, batch %lld per rank, AdamW\n",
                comm().size(), kCommCount, dtl::format_bytes(kCommCount * 4).c_str(),
                dtl::format_bytes(kCommCount * 2).c_str(), static_cast<long long>(kIn),
                static_cast<long long>(kHidden), kDepth, static_cast<long long>(kClasses),
                static_cast<long long>(params), static_cast<long long>(kBatch));
    std::printf("# impl = 16-bit, vendor = fp32 through the same backend (MPI_Allreduce, MPI_SUM); ratio = impl/fp32 "
                "per pair, median. 'emulated' rows: times are the alpha-beta model's, the reduction is real. "
                "err: max |16-bit average - exact| / max |exact|\n");
  }
  std::vector<std::string> backends = {"mpi-half", "10GbE", "1GbE"};
  if (dtl::bench::quick()) backends = {"mpi-half", "10GbE"};
  for (const std::string& label : backends) {
    const std::string shown = label == "mpi-half" ? label : "emulated " + label;
    for (dtl::DType t : {dtl::DType::kF16, dtl::DType::kBF16}) {
      for (lab05::DividePlacement where : {lab05::DividePlacement::kPre, lab05::DividePlacement::kPost}) {
        if (dtl::bench::quick() && t == dtl::DType::kBF16) continue;
        const std::string name = "Comm/" + shown + "/" + dtl::dtype_name(t) + " " +
                                 (where == lab05::DividePlacement::kPre ? "pre" : "post");
        add(name, [label, t, where](benchmark::State& s) { comm_row(s, label, t, where); });
      }
    }
    for (lab05::Precision p : {lab05::Precision::kF16, lab05::Precision::kBF16}) {
      add("Step/" + shown + "/" + lab05::precision_name(p), [label, p](benchmark::State& s) { step_row(s, label, p); });
    }
  }
}

void print_memory() {
  if (comm().rank() != 0) return;
  std::printf("\n# memory per category after construction (harness/nn MemoryTracker; one rank), the MLP above:\n");
  std::printf("| precision | parameters | gradients | optimizer (master + AdamW) | compute copies (other) | B/param (first three) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (lab05::Precision p : {lab05::Precision::kF32, lab05::Precision::kF16, lab05::Precision::kBF16}) {
    auto& tracker = nn::memory_tracker();
    const nn::MemorySnapshot before = tracker.snapshot();
    // One rank alone: a communicator of this rank only (the broadcast is then local).
    MPI_Comm self = MPI_COMM_NULL;
    DTL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &self));
    {
      auto solo = lab05::make_communicator("mpi-half", self);
      nn::Model model = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1);
      lab05::MixedPrecisionTrainer t(*solo, model, {.precision = p});
      using C = nn::MemoryCategory;
      auto d = [&](C cat) { return tracker.current(cat) - before.current[static_cast<int>(cat)]; };
      const std::int64_t n = model.parameter_count();
      std::printf("| %s | %s | %s | %s | %s | %.0f |\n", lab05::precision_name(p),
                  nn::human_bytes(d(C::kParameters)).c_str(), nn::human_bytes(d(C::kGradients)).c_str(),
                  nn::human_bytes(d(C::kOptimizerState)).c_str(), nn::human_bytes(d(C::kOther)).c_str(),
                  static_cast<double>(d(C::kParameters) + d(C::kGradients) + d(C::kOptimizerState)) /
                      static_cast<double>(n));
    }
    MPI_Comm_free(&self);
  }
}

// fp16 with dynamic scaling on the spirals (every rank its share of 64 rows),
// default GradScaler settings except a growth interval of 100.
void scale_trajectory() {
  dtl::Communicator& c = backend("mpi-half");
  const dtl::data::Classification data = dtl::data::make_spirals(4000, 3, 0.1f, 5);
  nn::Model model = nn::make_mlp(2, 64, 3, 2, 3);
  lab05::MixedOptions o;
  o.precision = lab05::Precision::kF16;
  o.adamw = {.lr = 1e-2f, .weight_decay = 0.0f};
  o.scaler = {.mode = lab05::ScalingMode::kDynamic, .init_scale = 65536.0f, .growth_interval = 100};
  lab05::MixedPrecisionTrainer trainer(c, model, o);
  const std::int64_t global = 64, rows = global / c.world_size();
  nn::Tensor x = nn::Tensor::zeros({rows, 2}, nn::DType::kF32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({rows}, nn::DType::kI32, nn::MemoryCategory::kOther);
  const int steps = dtl::bench::quick() ? 300 : kTrajectorySteps;
  std::vector<lab05::StepResult> results;
  for (int step = 0; step < steps; ++step) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t row = (step * global + c.rank() * rows + r) % data.count;
      x.data<float>()[2 * r] = data.x[static_cast<std::size_t>(2 * row)];
      x.data<float>()[2 * r + 1] = data.x[static_cast<std::size_t>(2 * row + 1)];
      y.data<std::int32_t>()[r] = data.y[static_cast<std::size_t>(row)];
    }
    results.push_back(trainer.step(x, y));
  }
  if (c.rank() != 0) return;
  const char* dir = std::getenv("DTL_TRACE_OUT");
  const std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : ".") + "/lab05_scale_trajectory.csv";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw dtl::Error("cannot write " + path);
  std::fprintf(f, "step,scale,skipped,loss,underflow_fraction\n");
  int skipped = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    std::fprintf(f, "%zu,%g,%d,%.6f,%.6f\n", i, results[i].scale, results[i].skipped ? 1 : 0, results[i].loss,
                 results[i].rounding.underflow_fraction());
    skipped += results[i].skipped ? 1 : 0;
  }
  std::fclose(f);
  std::printf("\n# loss scale, fp16 dynamic (init 2^16, growth interval 100) on the spirals, %d steps at %d ranks: "
              "%d skipped, final scale %g, final loss %.4f; per step in %s\n",
              steps, c.world_size(), skipped, trainer.scaler().scale(), results.back().loss, path.c_str());
}

const bool registered = [] {
  dtl::bench::set_columns({{"impl_ms", "16-bit (ms)", "%11.2f"},
                           {"fp32_ms", "fp32 (ms)", "%9.2f"},
                           {"ratio", "ratio", "%6.2f"},
                           {"comm_ms", "comm (ms)", "%9.2f"},
                           {"fp32_comm_ms", "fp32 comm (ms)", "%14.2f"},
                           {"comm_ratio", "comm ratio", "%10.2f"},
                           {"bytes", "bytes/rank", "%10.0f"},
                           {"err", "err", "%8.1e"}});
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish([] {
    print_memory();
    scale_trajectory();
  });
  return true;
}();

}  // namespace
