// dtl_nn_gpu_step: the time and memory of one GPT training step on the GPU, the
// project's row of the PyTorch comparison (torch_gpt_step.py, which runs this).
//
// What this file teaches: how to time a GPU step honestly. Every op is queued on
// the compute stream and returns at once; the one wait per step is the loss,
// which SoftmaxCrossEntropy::forward copies to the host. So the host clock
// around a step measures the work of forward and loss (waited for) plus the
// queuing of backward and AdamW, whose execution the next step's loss waits
// for: the median over many steps is the steady-state step time. The batch is
// made on the GPU once (random tokens), as PyTorch's is.
//
//   dtl_nn_gpu_step VOCAB BATCH CONTEXT CHANNELS HEADS LAYERS [STEPS]
// prints one line:
//   dtl_nn_gpu_step: median_ms M tokens_per_s R peak_bytes P
// Peak bytes: memory_tracker(kCuda)'s peak total, exact tensor bytes
// (parameters, gradients, AdamW's state, activations, scratch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "harness/cuda/device.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"

namespace {

using dtl::nn::Device;
using dtl::nn::DType;
using dtl::nn::MemoryCategory;
using dtl::nn::Tensor;

int run(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: dtl_nn_gpu_step VOCAB BATCH CONTEXT CHANNELS HEADS LAYERS [STEPS]\n");
    return 1;
  }
  std::string why;
  if (dtl::cuda::gpu_count(&why) == 0) {
    std::fprintf(stderr, "dtl_nn_gpu_step: no GPU here (%s)\n", why.c_str());
    return 1;
  }
  const std::int64_t vocab = std::atoll(argv[1]), batch = std::atoll(argv[2]), seq = std::atoll(argv[3]);
  const std::int64_t channels = std::atoll(argv[4]), heads = std::atoll(argv[5]);
  const int layers = std::atoi(argv[6]);
  const int steps = argc > 7 ? std::atoi(argv[7]) : 50, warmup = 10;

  dtl::nn::Model model = dtl::nn::make_gpt(vocab, seq, channels, heads, layers, /*seed=*/1);
  model.to(Device::kCuda);
  const Tensor& params = model.flatten_values();
  const Tensor& grads = model.flatten_grads();
  dtl::nn::AdamW adam({.lr = 3e-3f, .weight_decay = 0.0f}, params.numel(), Device::kCuda);
  Tensor x = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
  Tensor y = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
  dtl::Rng rng(7);
  for (std::int32_t& v : x.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  for (std::int32_t& v : y.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  const Tensor x_dev = x.to(Device::kCuda), y_dev = y.to(Device::kCuda);
  dtl::nn::SoftmaxCrossEntropy ce;

  dtl::nn::memory_tracker(Device::kCuda).reset_peak();
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    model.zero_grad();
    ce.forward(model.forward(x_dev), y_dev);  // waits for the stream: the previous step is done too
    model.backward(ce.backward());
    adam.step(params, grads);
    if (i >= warmup) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf("dtl_nn_gpu_step: median_ms %.4f tokens_per_s %.0f peak_bytes %lld\n", 1e3 * median,
              static_cast<double>(batch * seq) / median,
              static_cast<long long>(dtl::nn::memory_tracker(Device::kCuda).snapshot().peak_total));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtl_nn_gpu_step: %s\n", e.what());
    return 1;
  }
}
