// Lab 05 benchmark: what 16-bit gradients buy in communication, and what a
// mixed-precision step costs on this machine; memory per category; the loss
// scale of a real fp16 run; where real gradients sit in fp16's range; and what
// an fp32 master copy is for.
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
// After the rows, rank 0 prints the memory per category of the three precisions
// (harness/nn's MemoryTracker), the arithmetic cost per element with and
// without hardware conversion (F16C, measured here for comparison; the lab's
// code is portable C++), and runs, writing CSV files to $DTL_TRACE_OUT
// (./dtl bench sets build/bench-out) from which slides/05_mixed_precision/make_figures.py draws:
//   lab05_scale_trajectory.csv  fp16 with dynamic loss scaling on the spirals for
//                     kTrajectorySteps steps: each step's scale, skip flag and loss;
//   lab05_grad_histogram.csv    at three steps of that run, log2 |g| of rank 0's
//                     fp32 gradients (one fp32 backward of the working weights);
//   lab05_master_weights.csv    the spirals MLP trained in fp32, in bf16 with an fp32
//                     master (the trainer), and with the weights kept in bf16 only.
#include <mpi.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "harness/bench/bench.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/optim.h"
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

#if defined(__x86_64__)
// For comparison only (the lab's code is portable C++): one 16-bit sum and divide
// pass with the F16C instructions (vcvtph2ps / vcvtps2ph, round to nearest even),
// which widen and round 8 fp16 values per instruction. Same bits as the portable
// conversions (checked below). count: a multiple of 8.
__attribute__((target("avx,f16c"))) void f16c_sum_and_divide(const std::uint16_t* in, std::uint16_t* inout,
                                                              std::size_t count, float divisor) {
  const __m256 d = _mm256_set1_ps(divisor);
  for (std::size_t i = 0; i < count; i += 8) {  // count is a multiple of 8 here (kCommCount)
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(inout + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m128i sum = _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(inout + i),
                     _mm256_cvtps_ph(_mm256_div_ps(_mm256_cvtph_ps(sum), d), _MM_FROUND_TO_NEAREST_INT));
  }
}
#endif

// What one average's arithmetic costs per element on this CPU: the lab's
// portable conversions, hardware conversion (F16C) where the CPU has it, and
// the vendor's fp32 sum.
void print_arithmetic() {
  if (comm().rank() != 0) return;
  const std::size_t n = kCommCount;
  auto best_of = [](const std::function<double()>& fn) {
    double best = 1e30;
    for (int i = 0; i < 9; ++i) best = std::min(best, fn());
    return best;
  };
  const double f16 = best_of([&] { return arithmetic_seconds(dtl::DType::kF16, n, 2); });
  const double bf16 = best_of([&] { return arithmetic_seconds(dtl::DType::kBF16, n, 2); });
  const double f32 = best_of([&] { return arithmetic_seconds(dtl::DType::kF32, n, 2); });
  static_assert(kCommCount % 8 == 0, "f16c_sum_and_divide() takes whole vectors");
  std::printf("\n# arithmetic of one average, %zu elements, one rank (best of 9): sum pass + divide pass\n", n);
  std::printf("| arithmetic | ms | ns per element |\n| --- | ---: | ---: |\n");
  auto row = [n](const char* what, double seconds) {
    std::printf("| %s | %.2f | %.2f |\n", what, seconds * 1e3, seconds * 1e9 / static_cast<double>(n));
  };
  row("fp16, reduce_half_sum + divide_half (portable conversions)", f16);
  row("bf16, reduce_half_sum + divide_half (portable conversions)", bf16);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
    dtl::Rng rng(3);
    std::vector<std::uint16_t> a(n), b(n), c, d;
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = nn::float_to_f16_bits(static_cast<float>(rng.normal()));
      b[i] = nn::float_to_f16_bits(static_cast<float>(rng.normal()));
    }
    c = b;
    d = b;
    f16c_sum_and_divide(a.data(), c.data(), n, 3.0f);
    lab05::reduce_half_sum(dtl::DType::kF16, a.data(), d.data(), n);
    lab05::divide_half(dtl::DType::kF16, d.data(), n, 3.0f);
    const double hw = best_of([&] {
      std::vector<std::uint16_t> e = b;
      const double begin = dtl::clock_seconds();
      f16c_sum_and_divide(a.data(), e.data(), n, 2.0f);
      return dtl::clock_seconds() - begin;
    });
    row(c == d ? "fp16, F16C hardware conversion (same bits as above)" : "fp16, F16C (BITS DIFFER from the above)", hw);
  } else {
    std::printf("| fp16, F16C hardware conversion | (this CPU has no F16C) | |\n");
  }
#endif
  row("fp32, MPI_Reduce_local (MPI_SUM) + divide_in_place", f32);
}

std::string out_path(const char* file) {
  const char* dir = std::getenv("DTL_TRACE_OUT");
  return std::string(dir != nullptr && *dir != '\0' ? dir : ".") + "/" + file;
}

std::FILE* open_csv(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw dtl::Error("cannot write " + path);
  return f;
}

// log2 |g| of the fp32 gradients of `working` (widened) on rows x, y: one
// forward and backward of a probe model of the same shape, at loss scale 1.
// Buckets floor(log2 |g|) from -60 to 10; exact zeros counted apart.
std::map<int, std::int64_t> gradient_histogram(const lab05::MixedPrecisionTrainer& trainer, const nn::Tensor& x,
                                               const nn::Tensor& y) {
  nn::Model probe = nn::make_mlp(2, 64, 3, 2, 3);
  const std::vector<nn::Parameter*> params = probe.parameters();
  const nn::Tensor values = nn::flatten_values(params), grads = nn::flatten_grads(params);
  nn::convert(values, trainer.working());
  nn::SoftmaxCrossEntropy ce;
  probe.zero_grad();
  ce.forward(probe.forward(x), y);
  probe.backward(ce.backward());
  std::map<int, std::int64_t> bins;
  for (float g : grads.span<float>()) {
    if (g == 0.0f) {
      ++bins[-1000];
      continue;
    }
    ++bins[std::clamp(static_cast<int>(std::floor(std::log2(std::abs(g)))), -60, 10)];
  }
  return bins;
}

// fp16 with dynamic scaling on the spirals (every rank its share of 64 rows),
// default GradScaler settings except a growth interval of 100. At three steps,
// rank 0 also records where its fp32 gradients sit (gradient_histogram()).
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
  const std::vector<int> probes = {0, steps / 10, steps - 1};
  std::vector<lab05::StepResult> results;
  std::vector<std::pair<int, std::map<int, std::int64_t>>> histograms;
  for (int step = 0; step < steps; ++step) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t row = (step * global + c.rank() * rows + r) % data.count;
      x.data<float>()[2 * r] = data.x[static_cast<std::size_t>(2 * row)];
      x.data<float>()[2 * r + 1] = data.x[static_cast<std::size_t>(2 * row + 1)];
      y.data<std::int32_t>()[r] = data.y[static_cast<std::size_t>(row)];
    }
    if (c.rank() == 0 && std::find(probes.begin(), probes.end(), step) != probes.end()) {
      histograms.emplace_back(step, gradient_histogram(trainer, x, y));
    }
    results.push_back(trainer.step(x, y));
  }
  if (c.rank() != 0) return;
  const std::string path = out_path("lab05_scale_trajectory.csv");
  std::FILE* f = open_csv(path);
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
  const std::string hist_path = out_path("lab05_grad_histogram.csv");
  f = open_csv(hist_path);
  std::fprintf(f, "step,scale,log2_bin,count\n");
  for (const auto& [step, bins] : histograms) {
    std::int64_t total = 0, below = 0, below_scaled = 0;
    const float scale = results[static_cast<std::size_t>(step)].scale;
    const int s = static_cast<int>(std::log2(scale));
    for (const auto& [bin, count] : bins) {
      std::fprintf(f, "%d,%g,%d,%lld\n", step, scale, bin, static_cast<long long>(count));
      if (bin == -1000) continue;
      total += count;
      below += bin < -25 ? count : 0;             // |g| < 2^-25: zero in fp16 (2^-25 itself ties to zero)
      below_scaled += bin + s < -25 ? count : 0;  // the same at the run's scale
    }
    std::printf("# gradients at step %d (rank 0, fp32 backward of the working weights): %lld non-zero; below 2^-25 "
                "(zero in fp16): %lld at scale 1, %lld at the run's scale 2^%d\n",
                step, static_cast<long long>(total), static_cast<long long>(below),
                static_cast<long long>(below_scaled), s);
  }
  std::fclose(f);
  std::printf("# histograms in %s\n", hist_path.c_str());
}

// Note [Master weights], run: the spirals MLP with AdamW, lr 1e-4 (updates of
// about 1e-4, below bf16's spacing for weights above 2^-6), on one rank,
// (1) in fp32; (2) bf16 working copy with an fp32 master (the trainer, bf16,
// no scaling); (3) weights kept in bf16 only: the same AdamW step, and then the
// weights rounded to bf16 in place, as if there were no fp32 copy.
void master_weights() {
  if (comm().rank() != 0) return;
  constexpr int kSteps = 1500;
  const int steps = dtl::bench::quick() ? 300 : kSteps;
  const dtl::data::Classification data = dtl::data::make_spirals(4000, 3, 0.1f, 5);
  const nn::AdamWOptions adam{.lr = 1e-4f, .weight_decay = 0.0f};
  const std::int64_t rows = 64;
  auto batch = [&](int step, nn::Tensor& x, nn::Tensor& y) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t row = (step * rows + r) % data.count;
      x.data<float>()[2 * r] = data.x[static_cast<std::size_t>(2 * row)];
      x.data<float>()[2 * r + 1] = data.x[static_cast<std::size_t>(2 * row + 1)];
      y.data<std::int32_t>()[r] = data.y[static_cast<std::size_t>(row)];
    }
  };
  nn::Tensor x = nn::Tensor::zeros({rows, 2}, nn::DType::kF32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({rows}, nn::DType::kI32, nn::MemoryCategory::kOther);
  // (1) and (3): harness/nn only.
  auto plain = [&](bool bf16_only) {
    nn::Model model = nn::make_mlp(2, 64, 3, 2, 3);
    const std::vector<nn::Parameter*> params = model.parameters();
    const nn::Tensor values = nn::flatten_values(params), grads = nn::flatten_grads(params);
    nn::Tensor rounded = nn::Tensor::zeros({values.numel()}, nn::DType::kBF16, nn::MemoryCategory::kOther);
    if (bf16_only) {
      nn::convert(rounded, values);
      nn::convert(values, rounded);
    }
    nn::AdamW opt(adam, values.numel());
    nn::SoftmaxCrossEntropy ce;
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
      batch(step, x, y);
      model.zero_grad();
      losses.push_back(ce.forward(model.forward(x), y));
      model.backward(ce.backward());
      opt.step(values.span<float>(), grads.span<float>());
      if (bf16_only) {
        nn::convert(rounded, values);
        nn::convert(values, rounded);
      }
    }
    return losses;
  };
  const std::vector<double> fp32 = plain(false), bf16_only = plain(true);
  // (2): the trainer on a communicator of this rank alone.
  std::vector<double> mixed;
  MPI_Comm self = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &self));
  {
    auto solo = lab05::make_communicator("mpi-half", self);
    nn::Model model = nn::make_mlp(2, 64, 3, 2, 3);
    lab05::MixedOptions o;
    o.precision = lab05::Precision::kBF16;
    o.scaler = {.mode = lab05::ScalingMode::kNone};
    o.adamw = adam;
    lab05::MixedPrecisionTrainer trainer(*solo, model, o);
    for (int step = 0; step < steps; ++step) {
      batch(step, x, y);
      mixed.push_back(trainer.step(x, y).loss);
    }
  }
  MPI_Comm_free(&self);
  const std::string path = out_path("lab05_master_weights.csv");
  std::FILE* f = open_csv(path);
  std::fprintf(f, "step,fp32,bf16_fp32_master,bf16_only\n");
  for (int step = 0; step < steps; ++step) {
    std::fprintf(f, "%d,%.6f,%.6f,%.6f\n", step, fp32[static_cast<std::size_t>(step)],
                 mixed[static_cast<std::size_t>(step)], bf16_only[static_cast<std::size_t>(step)]);
  }
  std::fclose(f);
  auto tail = [steps](const std::vector<double>& v) {
    double sum = 0.0;
    for (int i = steps - 100; i < steps; ++i) sum += v[static_cast<std::size_t>(i)];
    return sum / 100.0;
  };
  std::printf("\n# master weights: spirals MLP, AdamW lr 1e-4, %d steps, one rank; mean loss of the last 100 steps: "
              "fp32 %.4f, bf16 + fp32 master %.4f, bf16 weights only %.4f; per step in %s\n",
              steps, tail(fp32), tail(mixed), tail(bf16_only), path.c_str());
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
    if (!g_teaching_rows_ran) return;
    print_memory();
    print_arithmetic();
    scale_trajectory();
    master_weights();
  });
  return true;
}();

}  // namespace
