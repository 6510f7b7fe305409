// Lab 05 benchmark, task D's rows: PowerSGD (lab05/powersgd.h) against 16-bit and
// fp32 gradient averaging, on the benchmark's MLP (mixed_bench.h), trained from
// the same weights on the same batches for the same number of steps.
//
// Rows PowerSGD/<link>/<scheme>, one training run each (Iterations(1), steps() steps):
//   fp32        Precision::kF32, the trainer's fp32 averaging allreduce (kAvg)
//   fp16        Precision::kF16 (static scale 256), allreduce_mean_half()
//   bf16        Precision::kBF16, allreduce_mean_half(): the uncompressed 16-bit run
//   powersgd rN Precision::kBF16 with PowerSgd::hook() of rank N (1, 2, 4) in
//               allreduce_mean_half()'s place; P and Q travel in fp32
//   powersgd rN wu10 it3   the same with Note [Warm-up and power iterations]'s
//               practice: 10 uncompressed warm-up steps, 3 power iterations per step
//   ... bf16    the warm-up sent in bf16 (PowerSgdOptions::exact_dtype, Note [Error reset])
//   ... bf16 rs15   and an error reset every 15 compressed calls, also in bf16
//   powersgd r4 wu10 it3 bf16   rank 4 with the bf16 warm-up: about the bytes of "r2 ... rs15"
// Counters: bytes per rank per step on the wire, averaged over the run (the
// trainer's comm_bytes for the allreduce rows; PowerSgd::bytes_at_step() for
// PowerSGD, so the warm-up's and the resets' exact steps count) and of one
// compressed call ("steady", bytes_per_step()), the median step and averaging
// time, and two final losses: the mean of the last 10 steps' training losses, and
// the held-out loss (the final model on 4096 rows no step trains on, the same rows
// for every run). The task is learnable and not memorised: fresh inputs every step,
// labels from a fixed random linear "teacher". After the rows rank 0 prints the
// table, with each run's bytes and losses against the fp32 run's (the goal:
// PowerSGD rank 2 at <= 0.1x fp32's bytes, final loss within 5%).
// Environment: DTL_POWERSGD_SEED=k (k > 0) draws another teacher and other batches,
// for the same table on other data; DTL_POWERSGD_STEPS=n trains n steps;
// DTL_POWERSGD_BATCH=b gives each rank b rows per step (default 32);
// DTL_POWERSGD_EXTRA=rank,warmup,iterations,reset,bf16 adds one row of those options.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/error.h"
#include "harness/nn/loss.h"
#include "harness/nn/model.h"
#include "harness/random.h"
#include "lab05/mixed.h"
#include "lab05/powersgd.h"
#include "mixed_bench.h"

namespace dtl::lab05::mixed_bench {
namespace {

namespace nn = dtl::nn;
using dtl::bench::comm;

struct Scheme {
  std::string name;
  Precision precision;
  int rank;  // PowerSGD's r; 0: no compression
  int warmup_steps = 0;
  int power_iterations = 1;
  int error_reset_period = 0;
  DType exact_dtype = DType::kF32;
};

struct Outcome {
  std::string row;
  double bytes = 0, steady_bytes = 0, step_ms = 0, comm_ms = 0, loss = 0, first_loss = 0, eval = 0;
};
std::vector<Outcome>& outcomes() {
  static std::vector<Outcome> all;
  return all;
}

// Steps per run: 150 (quick: 30), or DTL_POWERSGD_STEPS (at least 10: the loss is the
// mean of the last 10), e.g. DTL_POWERSGD_STEPS=600 for the longer run in RESULTS.md.
int steps() {
  static const int n = [] {
    const char* env = std::getenv("DTL_POWERSGD_STEPS");
    if (env == nullptr) return dtl::bench::quick() ? 30 : 150;
    const int v = std::atoi(env);
    if (v < 10) throw dtl::Error("DTL_POWERSGD_STEPS is " + std::string(env) + "; it must be a number >= 10");
    return v;
  }();
  return n;
}

// The data's seed: 0 (the default: the rows in RESULTS.md), or DTL_POWERSGD_SEED.
std::uint64_t data_seed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("DTL_POWERSGD_SEED");
    if (env == nullptr) return 0;
    const int v = std::atoi(env);
    if (v < 0) throw dtl::Error("DTL_POWERSGD_SEED is " + std::string(env) + "; it must be a number >= 0");
    return v;
  }();
  return seed;
}

// Rows [rank b, (rank + 1) b) of step `step`'s global batch: x ~ N(0, 1), y = argmax(T x)
// for a fixed 10 x kIn teacher T. The same for every scheme.
void fill_batch(dtl::Rng& draw, std::int64_t rows, nn::Tensor& x, nn::Tensor& y) {
  static const std::vector<float> teacher = [] {
    dtl::Rng rng(4242 + 7919 * data_seed());
    std::vector<float> t(static_cast<std::size_t>(kClasses * kIn));
    for (float& v : t) v = static_cast<float>(rng.normal());
    return t;
  }();
  float* xs = x.data<float>();
  for (std::int64_t i = 0; i < rows * kIn; ++i) xs[i] = static_cast<float>(draw.normal());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    float best_v = -1e30f;
    for (std::int64_t c = 0; c < kClasses; ++c) {
      float v = 0.0f;
      for (std::int64_t k = 0; k < kIn; ++k) v += teacher[static_cast<std::size_t>(c * kIn + k)] * xs[r * kIn + k];
      if (v > best_v) best_v = v, best = c;
    }
    y.data<std::int32_t>()[r] = static_cast<std::int32_t>(best);
  }
}

// Rows per rank per step: kBatch (32, the rows in RESULTS.md), or DTL_POWERSGD_BATCH. A larger
// batch makes each step's mean gradient less noisy (RESULTS.md, "Where the gap comes from").
std::int64_t rows_per_rank() {
  static const std::int64_t rows = [] {
    const char* env = std::getenv("DTL_POWERSGD_BATCH");
    if (env == nullptr) return kBatch;
    const long long v = std::atoll(env);
    if (v < 1) throw dtl::Error("DTL_POWERSGD_BATCH is " + std::string(env) + "; it must be a number >= 1");
    return static_cast<std::int64_t>(v);
  }();
  return rows;
}

void make_batch(int step, int rank, nn::Tensor& x, nn::Tensor& y) {
  dtl::Rng rng(1000003ull * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank) + (data_seed() << 40));
  fill_batch(rng, rows_per_rank(), x, y);
}

// The held-out loss: the final model's mean loss on kEvalRows fresh rows of the same teacher,
// drawn from a stream no training batch uses (the same rows for every scheme and world size).
inline constexpr std::int64_t kEvalRows = 4096;
double heldout_loss(nn::Model& model) {
  nn::Tensor x = nn::Tensor::zeros({kEvalRows, kIn}, nn::DType::kF32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({kEvalRows}, nn::DType::kI32, nn::MemoryCategory::kOther);
  dtl::Rng rng(0x5eed0fe7a1ull + 104729ull * data_seed());
  fill_batch(rng, kEvalRows, x, y);
  nn::SoftmaxCrossEntropy ce;
  return ce.forward(model.forward(x), y);
}

void train_row(benchmark::State& state, const std::string& row, const std::string& label, const Scheme& scheme) {
  dtl::Communicator& c = backend(label);
  nn::Model model = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1);
  std::unique_ptr<PowerSgd> psgd;
  MixedOptions o;
  o.precision = scheme.precision;
  o.scaler = scheme.precision == Precision::kF16 ? LossScalerOptions{.mode = ScalingMode::kStatic, .init_scale = 256.0f}
                                                 : LossScalerOptions{.mode = ScalingMode::kNone};
  if (scheme.rank > 0) {
    psgd = std::make_unique<PowerSgd>(matrix_layout(model),
                                      PowerSgdOptions{.rank = scheme.rank,
                                                      .warmup_steps = scheme.warmup_steps,
                                                      .power_iterations = scheme.power_iterations,
                                                      .error_reset_period = scheme.error_reset_period,
                                                      .exact_dtype = scheme.exact_dtype});
    o.hooks.average = psgd->hook();
  }
  MixedPrecisionTrainer trainer(c, model, o);
  nn::Tensor x = nn::Tensor::zeros({rows_per_rank(), kIn}, nn::DType::kF32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({rows_per_rank()}, nn::DType::kI32, nn::MemoryCategory::kOther);
  Outcome out;
  out.row = row;
  std::vector<double> step_s, comm_s;
  const int n = steps();
  for (auto _ : state) {
    for (int step = 0; step < n; ++step) {
      make_batch(step, c.rank(), x, y);
      DTL_MPI_CHECK(MPI_Barrier(comm()));
      const double begin = dtl::clock_seconds();
      const StepResult r = trainer.step(x, y);
      double took = dtl::clock_seconds() - begin, averaging = r.comm_seconds;
      DTL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &took, 1, MPI_DOUBLE, MPI_MAX, comm()));
      DTL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &averaging, 1, MPI_DOUBLE, MPI_MAX, comm()));
      step_s.push_back(took);
      comm_s.push_back(averaging);
      if (step == 0) out.first_loss = r.loss;
      if (step >= n - 10) out.loss += r.loss / 10;
      out.bytes += static_cast<double>(psgd ? psgd->bytes_at_step(step) : r.comm_bytes) / n;
    }
    state.SetIterationTime(dtl::bench::median(step_s) * n);
  }
  out.eval = heldout_loss(trainer.model());
  out.steady_bytes = psgd ? static_cast<double>(psgd->bytes_per_step()) : out.bytes;
  out.step_ms = dtl::bench::median(step_s) * 1e3;
  out.comm_ms = dtl::bench::median(comm_s) * 1e3;
  state.counters["impl_ms"] = out.step_ms;
  state.counters["bytes"] = out.bytes;
  state.counters["steady_bytes"] = out.steady_bytes;
  outcomes().push_back(out);
}

void register_rows() {
  const std::vector<Scheme> schemes = {{"fp32", Precision::kF32, 0},
                                       {"fp16", Precision::kF16, 0},
                                       {"bf16", Precision::kBF16, 0},
                                       {"powersgd r1", Precision::kBF16, 1},
                                       {"powersgd r2", Precision::kBF16, 2},
                                       {"powersgd r4", Precision::kBF16, 4},
                                       {"powersgd r1 wu10 it3", Precision::kBF16, 1, 10, 3},
                                       {"powersgd r2 wu10 it3", Precision::kBF16, 2, 10, 3},
                                       {"powersgd r4 wu10 it3", Precision::kBF16, 4, 10, 3},
                                       {"powersgd r2 wu10 it3 bf16", Precision::kBF16, 2, 10, 3, 0, DType::kBF16},
                                       {"powersgd r2 wu10 it3 bf16 rs15", Precision::kBF16, 2, 10, 3, 15, DType::kBF16},
                                       {"powersgd r4 wu10 it3 bf16", Precision::kBF16, 4, 10, 3, 0, DType::kBF16}};
  std::vector<Scheme> all = schemes;
  // One more row of PowerSGD's options: DTL_POWERSGD_EXTRA=rank,warmup,iterations,reset,bf16 (the
  // last 1: the exact calls in bf16), e.g. 2,10,3,15,1 is the "bf16 rs15" row again.
  if (const char* extra = std::getenv("DTL_POWERSGD_EXTRA")) {
    int r = 0, wu = -1, it = 0, rs = -1, bf = -1;
    if (std::sscanf(extra, "%d,%d,%d,%d,%d", &r, &wu, &it, &rs, &bf) != 5 || r < 1 || wu < 0 || it < 1 || rs < 0 ||
        (bf != 0 && bf != 1)) {
      throw dtl::Error("DTL_POWERSGD_EXTRA is " + std::string(extra) +
                       "; it must be rank,warmup,iterations,reset,bf16 (rank >= 1, iterations >= 1, bf16 0 or 1)");
    }
    all.push_back({std::string("powersgd extra ") + extra, Precision::kBF16, r, wu, it, rs, bf ? DType::kBF16 : DType::kF32});
  }
  std::vector<std::string> links = {"mpi-half", "1GbE"};
  if (dtl::bench::quick()) links = {"mpi-half"};
  for (const std::string& label : links) {
    const std::string shown = label == "mpi-half" ? label : "emulated " + label;
    for (const Scheme& s : all) {
      const std::string row = "PowerSGD/" + shown + "/" + s.name;
      benchmark::RegisterBenchmark(row.c_str(), [row, label, s](benchmark::State& st) { train_row(st, row, label, s); })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// Rank 0: every run beside the fp32 run of its link.
void print_table() {
  if (outcomes().empty() || comm().rank() != 0) return;
  std::printf("\n# PowerSGD against 16-bit and fp32 averaging: %d ranks, %d steps of the MLP (%lld rows per rank, "
              "fresh inputs each step, teacher labels, data seed %llu), AdamW lr 1e-3, from the same weights.\n",
              comm().size(), steps(), static_cast<long long>(rows_per_rank()), static_cast<unsigned long long>(data_seed()));
  std::printf("# bytes: per rank per step, the mean over the run (warm-up included) and after the warm-up; loss: mean of "
              "the last 10 steps; held-out: the final model on 4096 rows no step trained on; x fp32: against the fp32 run of the "
              "same link.\n");
  std::printf("%-54s %12s %9s %12s %9s %9s %10s %9s %9s %9s %9s %9s\n", "run", "bytes/step", "x fp32", "steady", "x fp32",
              "step ms", "average ms", "loss@1", "loss", "x fp32", "held-out", "x fp32");

  std::map<std::string, const Outcome*> fp32;
  for (const Outcome& o : outcomes()) {
    if (o.row.ends_with("/fp32")) fp32[o.row.substr(0, o.row.size() - 5)] = &o;
  }
  for (const Outcome& o : outcomes()) {
    const auto it = fp32.find(o.row.substr(0, o.row.rfind('/')));
    const Outcome* base = it == fp32.end() ? &o : it->second;
    std::printf("%-54s %12.0f %9.3f %12.0f %9.3f %9.2f %10.2f %9.4f %9.4f %9.3f %9.4f %9.3f\n", o.row.c_str(), o.bytes,
                o.bytes / base->bytes, o.steady_bytes, o.steady_bytes / base->bytes, o.step_ms, o.comm_ms, o.first_loss,
                o.loss, o.loss / base->loss, o.eval, o.eval / base->eval);
  }
  std::fflush(stdout);
}

const bool registered = [] {
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(print_table);
  return true;
}();

}  // namespace
}  // namespace dtl::lab05::mixed_bench
