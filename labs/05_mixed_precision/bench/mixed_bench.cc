// Lab 05 benchmark, the timed rows: what 16-bit gradients buy in communication,
// and what a mixed-precision step costs on this machine. The tables and runs
// after the rows (memory per category, the loss scale of a real fp16 run, where
// real gradients sit in fp16's range, what an fp32 master copy is for) are in
// mixed_figures_bench.cc; mixed_bench.h is what the two files share.
//
// Rows (2 ranks by default; `./dtl bench 05 -n 4` for more). Each pairs the
// 16-bit version (impl) with fp32 through the same backend (vendor column:
// Open MPI's MPI_Allreduce with MPI_SUM), median per pair:
//   Grade/comm/emulated/bf16 post   the grader's row (See Note [The graded row])
//   Comm/<backend>/<f16|bf16> <pre|post>  allreduce_mean_half() of kCommCount
//                     elements beside an fp32 averaging allreduce of as many floats;
//                     err = max |result - exact f64 average| / max |exact average|
//   Step/<backend>/<fp16|bf16>  one MixedPrecisionTrainer::step() (dynamic scaling
//                     for fp16, none for bf16) beside the fp32 trainer's step,
//                     with the gradient-averaging time of each (comm ratio)
// backends: "mpi-half" (real shared memory: HalfSumCommunicator, 16-bit sums in
// your reduce_half_sum() as an MPI user op) and "emulated 10GbE" / "emulated 1GbE"
// (EmulatedCommunicator over mpi-half: the reduction is real, the time is the
// alpha-beta model's — EMULATED, not measured on such a link).
//
// So that a row says *why* it is fast or slow, it also gives the two parts of
// communication time separately: the link model's time for the 16-bit and the
// fp32 average (model_seconds(); on an emulated link), and the arithmetic a
// rank does for one average on this CPU, measured alone: one reduce_half_sum()
// and one divide_half() pass over the buffer, against one MPI_Reduce_local
// (MPI_SUM) and one divide of fp32. `late` is the fraction of the 16-bit
// side's allreduces (in a step: the gradient buckets, the loss and the
// found-inf flag) that ended after the link model said they would (the CPU,
// not the link, set their time).
//
// After the rows, mixed_figures_bench.cc prints the memory per category, the
// arithmetic per element, and writes the CSV files of the slides' figures.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/half.h"
#include "harness/nn/model.h"
#include "harness/random.h"
#include "lab05/mixed.h"
#include "mixed_bench.h"

namespace dtl::lab05::mixed_bench {
namespace {

namespace nn = dtl::nn;
namespace lab05 = dtl::lab05;
using dtl::bench::comm;

std::string backend_spec(const std::string& label) { return label == "mpi-half" ? label : "emulated:" + label; }

}  // namespace

dtl::Communicator& backend(const std::string& label) {
  static std::vector<std::pair<std::string, std::unique_ptr<dtl::Communicator>>> made;
  for (auto& [name, c] : made) {
    if (name == label) return *c;
  }
  made.emplace_back(label, lab05::make_communicator(backend_spec(label), comm()));
  return *made.back().second;
}

namespace {

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

}  // namespace

// The arithmetic of one average on this rank, alone (no communication): one
// reduce_half_sum() and one divide_half() pass over `count` 16-bit elements, or
// one MPI_Reduce_local(MPI_SUM) and one divide of fp32. Seconds.
double arithmetic_seconds(dtl::DType dtype, std::size_t count, int world) {
  if (dtype == dtl::DType::kF32) {
    std::vector<float> a(count, 1.0f), b(count, 2.0f);
    const double begin = dtl::clock_seconds();
    DTL_MPI_CHECK(MPI_Reduce_local(a.data(), b.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM));
    dtl::divide_in_place(b.data(), count, dtl::DType::kF32, world);
    return dtl::clock_seconds() - begin;
  }
  const std::uint16_t one = dtype == dtl::DType::kF16 ? nn::float_to_f16_bits(1.0f) : nn::float_to_bf16_bits(1.0f);
  std::vector<std::uint16_t> a(count, one), b(count, one);
  const double begin = dtl::clock_seconds();
  lab05::reduce_half_sum(dtype, a.data(), b.data(), count);
  lab05::divide_half(dtype, b.data(), count, static_cast<float>(world));
  return dtl::clock_seconds() - begin;
}

namespace {

// The link model's time of one allreduce of `bytes` (0 on real shared memory).
double link_seconds(const std::string& label, std::size_t bytes, int world) {
  if (label == "mpi-half") return 0.0;
  return dtl::model_seconds(dtl::parse_link(label), dtl::CollectiveKind::kAllreduce, bytes, world);
}

std::size_t late_operations(dtl::Communicator& c) {
  auto* emulated = dynamic_cast<dtl::EmulatedCommunicator*>(&c);
  return emulated == nullptr ? 0 : emulated->late_operations();
}

// The columns that split communication into the link and the arithmetic.
void parts(benchmark::State& state, const std::string& label, dtl::DType dtype, std::size_t count, int world,
           int allreduces, std::size_t late, std::size_t issued) {
  std::vector<double> a16, a32;
  for (int i = 0; i < 5; ++i) {
    a16.push_back(slowest(arithmetic_seconds(dtype, count, world)));
    a32.push_back(slowest(arithmetic_seconds(dtl::DType::kF32, count, world)));
  }
  const double l16 = link_seconds(label, count * 2, world), l32 = link_seconds(label, count * 4, world);
  state.counters["link16_ms"] = l16 * 1e3 * allreduces;
  state.counters["link32_ms"] = l32 * 1e3 * allreduces;
  state.counters["arith16_ms"] = dtl::bench::median(a16) * 1e3 * allreduces;
  state.counters["arith32_ms"] = dtl::bench::median(a32) * 1e3 * allreduces;
  state.counters["late"] = issued == 0 ? 0.0 : static_cast<double>(late) / static_cast<double>(issued);
}

bool g_teaching_rows_ran = false;  // the tables and runs after the rows come with these rows only

void comm_row(benchmark::State& state, const std::string& label, dtl::DType dtype, lab05::DividePlacement where,
              std::size_t count = kCommCount) {
  g_teaching_rows_ran = g_teaching_rows_ran || count == kCommCount;
  dtl::Communicator& c = backend(label);
  const std::vector<float> mine = gradients(count, c.rank());
  // The exact average, in double, for the error column.
  std::vector<double> exact(count, 0.0);
  for (int r = 0; r < c.world_size(); ++r) {
    const std::vector<float> theirs = gradients(count, r);
    for (std::size_t i = 0; i < count; ++i) exact[i] += theirs[i] / static_cast<double>(c.world_size());
  }
  std::vector<std::uint16_t> half(count);
  std::vector<float> f32(count);
  auto load_half = [&] {
    for (std::size_t i = 0; i < count; ++i) {
      half[i] = dtype == dtl::DType::kF16 ? nn::float_to_f16_bits(mine[i]) : nn::float_to_bf16_bits(mine[i]);
    }
  };
  dtl::bench::PairedTimer timer;
  std::size_t late = 0, issued = 0;
  for (auto _ : state) {
    load_half();
    f32 = mine;
    state.SetIterationTime(timer.time_pair(
        [&] {
          const std::size_t before = late_operations(c);
          lab05::allreduce_mean_half(c, half.data(), count, dtype, where);
          late += late_operations(c) - before;
          ++issued;
        },
        [&] { c.allreduce(f32.data(), count, dtl::DType::kF32, dtl::ReduceOp::kAvg).wait(); }));
  }
  double worst = 0.0, top = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    const double got = dtype == dtl::DType::kF16 ? nn::f16_bits_to_float(half[i]) : nn::bf16_bits_to_float(half[i]);
    worst = std::max(worst, std::abs(got - exact[i]));
    top = std::max(top, std::abs(exact[i]));
  }
  state.counters["impl_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["comm_ratio"] = timer.ratio_median();
  parts(state, label, dtype, count, c.world_size(), 1, late, issued);
  state.counters["bytes"] = static_cast<double>(count * 2);
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
  g_teaching_rows_ran = true;
  dtl::Communicator& c = backend(label);
  Run impl(c, p), fp32(c, lab05::Precision::kF32);
  impl.step();  // warm-up (and, for fp16, the first scale)
  fp32.step();
  dtl::bench::PairedTimer timer;
  std::vector<double> comm_impl, comm_fp32, ratios;
  std::size_t late = 0, issued = 0;
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair(
        [&] {
          const std::size_t before = late_operations(c);
          impl.step();
          late += late_operations(c) - before;
          issued += static_cast<std::size_t>(impl.last.buckets) + 2;  // + the loss and the found-inf flag
        },
        [&] { fp32.step(); }));
    const double a = slowest(impl.last.comm_seconds), b = slowest(fp32.last.comm_seconds);
    comm_impl.push_back(a);
    comm_fp32.push_back(b);
    ratios.push_back(b > 0 ? a / b : 0.0);
  }
  state.counters["impl_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["comm_ratio"] = dtl::bench::median(ratios);
  // One bucket (the default 25 MiB cap holds the whole MLP's 16-bit gradients).
  const auto count = static_cast<std::size_t>(impl.model.parameter_count());
  parts(state, label, p == lab05::Precision::kF16 ? dtl::DType::kF16 : dtl::DType::kBF16, count,
        c.world_size(), impl.last.buckets, late, issued);
  state.counters["bytes"] = static_cast<double>(impl.last.comm_bytes);
  state.counters["err"] = 0.0;
}

// ---------------------------------------------------------------------------
// The graded row
// ---------------------------------------------------------------------------
//
// Note [The graded row]
// ---------------------
// The grader's speed item (grader/rubrics/05.toml) runs Grade/comm/emulated/bf16 post
// for the submission and for the reference: allreduce_mean_half() of kGradeCount bf16
// elements beside an fp32 averaging allreduce of as many floats, over an emulated link
// slow enough that the link, not this machine's arithmetic, sets the time (alpha
// 0.1 ms, 25 MB/s: the fp32 average of 1 MiB takes 2 alpha + n / B = 42 ms at 2
// ranks, the 16-bit one 21 ms; the real 16-bit adds of 256 Ki elements take about
// 1 ms). ratio = 16-bit / fp32 per pair: about 0.55 for the reference; 1 for a
// submission that widens to fp32 before it sends (correct, and no faster).
constexpr std::size_t kGradeCount = std::size_t{1} << 18;
constexpr const char* kGradeLink = "alpha=100us,bw=25MB/s";

void register_rows() {
  add("Grade/comm/emulated/bf16 post", [](benchmark::State& s) {
    comm_row(s, kGradeLink, dtl::DType::kBF16, lab05::DividePlacement::kPost, kGradeCount);
  });
  const std::int64_t params = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1).parameter_count();
  if (comm().rank() == 0) {
    std::printf("# %d ranks. Comm rows: %zu elements (fp32 %s, 16-bit %s). Step rows: MLP in %lld, hidden %lld x %d, "
                "%lld classes, %lld parameters, batch %lld per rank, AdamW\n",
                comm().size(), kCommCount, dtl::format_bytes(kCommCount * 4).c_str(),
                dtl::format_bytes(kCommCount * 2).c_str(), static_cast<long long>(kIn),
                static_cast<long long>(kHidden), kDepth, static_cast<long long>(kClasses),
                static_cast<long long>(params), static_cast<long long>(kBatch));
    std::printf("# impl = 16-bit, vendor = fp32 through the same backend (MPI_Allreduce, MPI_SUM); ratio = impl/fp32 "
                "per pair, median (Step rows: the step; comm ratio: its gradient averaging). 'emulated' rows: times "
                "are the alpha-beta model's, the reduction is real. link: the link model's time for the 16-bit and the "
                "fp32 average (0: no model, real shared memory). arith: one rank's adds and divide of one average, measured alone "
                "(16-bit: reduce_half_sum + divide_half; fp32: MPI_Reduce_local + divide). late: fraction of the 16-bit "
                "side's allreduces (Step rows: gradient buckets, loss, found-inf flag) that ended after the link "
                "model's time. err: max |16-bit average - exact| / max |exact|\n");
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

const bool registered = [] {
  dtl::bench::set_columns({{"impl_ms", "16-bit (ms)", "%11.2f"},
                           {"fp32_ms", "fp32 (ms)", "%9.2f"},
                           {"ratio", "ratio", "%6.2f"},
                           {"comm_ratio", "comm ratio", "%10.2f"},
                           {"link16_ms", "16-bit link (ms)", "%16.2f"},
                           {"link32_ms", "fp32 link (ms)", "%14.2f"},
                           {"arith16_ms", "16-bit arith (ms)", "%17.2f"},
                           {"arith32_ms", "fp32 arith (ms)", "%15.2f"},
                           {"late", "late", "%5.2f"},
                           {"bytes", "bytes/rank", "%10.0f"},
                           {"err", "err", "%8.1e"}});
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish([] {
    if (g_teaching_rows_ran) run_after_rows();  // mixed_figures_bench.cc
  });
  return true;
}();

}  // namespace
}  // namespace dtl::lab05::mixed_bench
