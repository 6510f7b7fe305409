// dtl_nn_bench: how fast the nn core's hot paths are, single process.
//
//   1. Linear forward + backward beside bare cblas_sgemm on the same three
//      GEMMs (y = x W^T, dW = dy^T x, dx = dy W): the layer adds the bias, its
//      gradient and the bookkeeping, and should lose less than 15%.
//   2. A step-time breakdown by layer (each unit's top-level layers) for the
//      MLP of `dtl_train mlp` and the GPT of `dtl_train gpt`, plus the loss and
//      the optimizer step, printed after the benchmarks.
//
// Rows report medians over paired runs (layer, then sgemm, alternating) and
// their ratio, never one absolute time: the machine is shared and noisy.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "harness/nn/gemm.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"

namespace {

using dtl::nn::DType;
using dtl::nn::MemoryCategory;
using dtl::nn::Tensor;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <typename F>
double time_seconds(F&& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Tensor random_tensor(const dtl::nn::Shape& shape, std::uint64_t seed) {
  dtl::Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kF32, MemoryCategory::kOther);
  for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(0.0, 1.0));
  return t;
}

// --------------------------------------------------------------------------
// 1. Linear vs bare sgemm. Args: rows N, in, out.
// --------------------------------------------------------------------------
void BM_LinearVsSgemm(benchmark::State& state) {
  const std::int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  dtl::Rng rng(1);
  dtl::nn::Linear layer("fc", in, out, DType::kF32, rng);
  const Tensor x = random_tensor({n, in}, 2);
  const Tensor dy = random_tensor({n, out}, 3);
  // The bare version's own buffers, same shapes.
  const Tensor w = random_tensor({out, in}, 4);
  Tensor y = Tensor::zeros({n, out}, DType::kF32, MemoryCategory::kOther);
  Tensor dw = Tensor::zeros({out, in}, DType::kF32, MemoryCategory::kOther);
  Tensor dx = Tensor::zeros({n, in}, DType::kF32, MemoryCategory::kOther);
  auto run_layer = [&] {
    layer.forward(x);
    layer.backward(dy, {});
  };
  auto run_sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x.data<float>(), in, w.data<float>(), in,
                0.0f, y.data<float>(), out);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy.data<float>(), out, x.data<float>(), in,
                1.0f, dw.data<float>(), in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy.data<float>(), out, w.data<float>(),
                in, 0.0f, dx.data<float>(), in);
  };
  run_layer();  // warm-up (allocates the layer's buffers, sets the thread count)
  run_sgemm();
  std::vector<double> layer_s, sgemm_s, ratio;
  bool layer_first = true;
  for (auto _ : state) {
    double a, b;
    if (layer_first) {
      a = time_seconds(run_layer);
      b = time_seconds(run_sgemm);
    } else {
      b = time_seconds(run_sgemm);
      a = time_seconds(run_layer);
    }
    layer_first = !layer_first;
    layer_s.push_back(a);
    sgemm_s.push_back(b);
    ratio.push_back(a / b);
    state.SetIterationTime(a);
  }
  const double flops = 6.0 * static_cast<double>(n * in * out);
  state.counters["layer_GFLOPs"] = flops / median(layer_s) * 1e-9;
  state.counters["sgemm_GFLOPs"] = flops / median(sgemm_s) * 1e-9;
  state.counters["ratio"] = median(ratio);  // layer time / sgemm time; 1.15 is the budget
}
BENCHMARK(BM_LinearVsSgemm)
    ->ArgNames({"N", "in", "out"})
    ->Args({512, 64, 192})     // GPT qkv: B*T = 8*64 rows, C = 64
    ->Args({512, 64, 256})     // GPT MLP fc
    ->Args({512, 256, 64})     // GPT MLP proj
    ->Args({64, 64, 64})       // the MLP example's hidden layer
    ->Args({256, 256, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->UseManualTime()
    ->Iterations(21)
    ->Unit(benchmark::kMicrosecond);

// --------------------------------------------------------------------------
// 2. Step breakdown by layer.
// --------------------------------------------------------------------------

// Runs `steps` training steps of `model`, timing every top-level layer's
// forward and backward, the loss and the optimizer, and prints a table of
// medians (ms per step) and shares.
void breakdown(const char* title, dtl::nn::Model& model, const Tensor& x, const Tensor& targets, int steps) {
  const Tensor& params = model.flatten_values();
  const Tensor& grads = model.flatten_grads();
  dtl::nn::AdamW adam({.lr = 1e-3f}, params.numel());
  dtl::nn::SoftmaxCrossEntropy ce;
  std::vector<std::string> names;
  for (int u = 0; u < model.unit_count(); ++u)
    for (const auto& layer : model.unit(u).layers) names.push_back(layer->name() + " (" + layer->kind() + ")");
  std::map<std::string, std::vector<double>> fwd, bwd;
  std::vector<double> loss_s, opt_s, step_s;
  for (int step = 0; step < steps + 2; ++step) {  // the first two are warm-up
    const bool keep = step >= 2;
    const auto step_start = Clock::now();
    model.zero_grad();
    const Tensor* h = &x;
    std::size_t k = 0;
    for (int u = 0; u < model.unit_count(); ++u)
      for (const auto& layer : model.unit(u).layers) {
        const double t = time_seconds([&] { h = &layer->forward(*h); });
        if (keep) fwd[names[k]].push_back(t);
        ++k;
      }
    const Tensor* g = nullptr;
    const double tl = time_seconds([&] {
      ce.forward(*h, targets);
      g = &ce.backward();
    });
    for (int u = model.unit_count() - 1; u >= 0; --u) {
      auto& layers = model.unit(u).layers;
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        --k;
        const double t = time_seconds([&] { g = &(*it)->backward(*g, {}); });
        if (keep) bwd[names[k]].push_back(t);
      }
    }
    const double to = time_seconds([&] { adam.step(params.span<float>(), grads.span<float>()); });
    const double ts = std::chrono::duration<double>(Clock::now() - step_start).count();
    if (keep) {
      loss_s.push_back(tl);
      opt_s.push_back(to);
      step_s.push_back(ts);
    }
  }
  // Shares are of the sum of the parts' medians; the median whole step (wall
  // clock, zero_grad included) is printed beside it. On a loaded machine the
  // two differ by the time the process was not running.
  double total = median(loss_s) + median(opt_s);
  for (const std::string& name : names) total += median(fwd[name]) + median(bwd[name]);
  std::printf("\n%s: %lld parameters; median step %.3f ms wall, sum of the parts' medians %.3f ms (%d steps)\n",
              title, static_cast<long long>(model.parameter_count()), 1e3 * median(step_s), 1e3 * total, steps);
  std::printf("  %-40s %12s %12s %8s\n", "layer", "forward ms", "backward ms", "share");
  for (const std::string& name : names) {
    const double f = median(fwd[name]), b = median(bwd[name]);
    std::printf("  %-40s %12.3f %12.3f %7.1f%%\n", name.c_str(), 1e3 * f, 1e3 * b, 100 * (f + b) / total);
  }
  std::printf("  %-40s %25.3f %7.1f%%\n", "softmax cross-entropy (fwd+bwd)", 1e3 * median(loss_s),
              100 * median(loss_s) / total);
  std::printf("  %-40s %25.3f %7.1f%%\n", "AdamW step (flat buffer)", 1e3 * median(opt_s), 100 * median(opt_s) / total);
}

void run_breakdowns() {
  {
    dtl::nn::Model mlp = dtl::nn::make_mlp(2, 64, 3, 2, 1);  // what dtl_train mlp trains
    Tensor x = random_tensor({64, 2}, 5);
    Tensor y = Tensor::zeros({64}, DType::kI32, MemoryCategory::kOther);
    for (std::int64_t i = 0; i < 64; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3);
    breakdown("MLP (dtl_train mlp: 2 -> 64 -> 64 -> 3, batch 64)", mlp, x, y, 200);
  }
  {
    const std::int64_t vocab = 33, batch = 8, seq = 64;
    dtl::nn::Model gpt = dtl::nn::make_gpt(vocab, seq, 64, 4, 2, 1);  // what dtl_train gpt trains
    Tensor x = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
    Tensor y = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
    dtl::Rng rng(7);
    for (std::int32_t& v : x.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(vocab));
    for (std::int32_t& v : y.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(vocab));
    breakdown("GPT (dtl_train gpt: V 33, T 64, C 64, 4 heads, 2 layers, batch 8)", gpt, x, y, 30);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  dtl::nn::gemm_threads();  // apply the default: one OpenBLAS thread (DTL_GEMM_THREADS overrides)
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  run_breakdowns();
  return 0;
}
