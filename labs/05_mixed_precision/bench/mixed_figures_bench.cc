// Lab 05 benchmark, after the rows (mixed_bench.cc holds the timed rows; the two
// files are one program, ./dtl bench 05; mixed_bench.h is what they share): the
// tables and runs that show what the rows cannot.
//
// Rank 0 prints the memory per category of the three precisions
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
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "harness/bench/bench.h"
#include "harness/comm/communicator.h"
#include "harness/error.h"
#include "harness/nn/half.h"
#include "harness/nn/layers.h"
#include "harness/nn/memory.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"
#include "lab05/mixed.h"
#include "mixed_bench.h"

namespace dtl::lab05::mixed_bench {
namespace {

namespace nn = dtl::nn;
namespace lab05 = dtl::lab05;
using dtl::bench::comm;

constexpr int kTrajectorySteps = 1500;

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

}  // namespace

void run_after_rows() {
  print_memory();
  print_arithmetic();
  scale_trajectory();
  master_weights();
}

}  // namespace dtl::lab05::mixed_bench
