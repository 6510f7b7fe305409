// Every layer, the loss, the optimizers and both models on the GPU, against the
// same objects on the CPU (the oracle: a separate implementation, dense.cc and
// friends). Each test skips, saying why, where there is no GPU (CI); CI checks
// the kernels' math on the host instead (kernels_host_test.cc).
//
// Tolerance, fp32: |gpu - cpu| <= tol (1 + |cpu|) element by element, with
// tol = 1e-4 for layers and 1e-4 relative for the loss of a training run.
// Why that much and no more: the GPU adds the same terms in another order
// (cuBLAS splits the GEMMs' k dimension, a warp sums a row lane by lane) and
// nvcc contracts a*b+c into one fused multiply-add. Each such sum of K terms of
// size ~1 then differs by about sqrt(K) * 2^-24 ~ 1e-6 for the K <= 128 used
// here (about 1e-5 in the worst case, all errors of one sign). 1e-4 leaves a
// tenfold margin over the worst case, and a wrong index or a missing term
// shows up at O(1e-2) or more. TF32 is off (cublasSgemm's default): with it,
// products would lose 13 bits and this bound would fail, as it should.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/error.h"
#include "harness/nn/compute_stream.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"

namespace dtl::nn {
namespace {

#define DTL_SKIP_WITHOUT_GPU()                                \
  do {                                                        \
    std::string why;                                          \
    if (dtl::cuda::gpu_count(&why) == 0) GTEST_SKIP() << why; \
  } while (0)

constexpr double kTol = 1e-4;

Tensor random_host(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kF32, MemoryCategory::kOther);
  for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(0.0, scale));
  return t;
}

Tensor random_tokens(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kI32, MemoryCategory::kOther);
  for (std::int32_t& v : t.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// A device tensor against its host oracle, element by element.
::testing::AssertionResult all_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  if (gpu.device() != Device::kCuda) return ::testing::AssertionFailure() << what << " is not on the GPU";
  if (gpu.shape() != cpu.shape()) {
    return ::testing::AssertionFailure() << what << ": shape " << to_string(gpu.shape()) << " vs " << to_string(cpu.shape());
  }
  const Tensor got = gpu.to(Device::kCpu);
  std::int64_t bad = 0, first = -1;
  for (std::int64_t i = 0; i < cpu.numel(); ++i) {
    const double g = got.data<float>()[i], c = cpu.data<float>()[i];
    if (g == c) continue;  // infinities included
    if (!(std::fabs(g - c) <= tol * (1.0 + std::fabs(c)))) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << cpu.numel() << " elements differ; first ["
                                       << first << "] gpu " << got.data<float>()[first] << " cpu "
                                       << cpu.data<float>()[first];
}

// Moves a layer's parameters (values and gradients) to the GPU.
void to_gpu(Layer& layer) {
  for (Parameter* p : layer.parameters()) {
    p->value = p->value.to(Device::kCuda);
    p->grad = p->grad.to(Device::kCuda);
  }
}

// Two forward/backward rounds on twin layers (same seed): outputs, input
// gradients and the gradients accumulated over both rounds must agree. The
// second round reuses the activation buffers and adds to the gradients.
void check_twins(Layer& cpu, Layer& gpu, const std::function<Tensor(int round)>& input, double tol) {
  to_gpu(gpu);
  for (int round = 0; round < 2; ++round) {
    const Tensor x = input(round);
    const Tensor& y_cpu = cpu.forward(x);
    const Tensor& y_gpu = gpu.forward(x.to(Device::kCuda));
    ASSERT_TRUE(all_close(y_gpu, y_cpu, tol, cpu.name() + " y, round " + std::to_string(round)));
    const Tensor dy = random_host(y_cpu.shape(), 100 + static_cast<std::uint64_t>(round));
    const Tensor& dx_cpu = cpu.backward(dy, {});
    const Tensor& dx_gpu = gpu.backward(dy.to(Device::kCuda), {});
    if (dx_cpu.defined()) {
      ASSERT_TRUE(all_close(dx_gpu, dx_cpu, tol, cpu.name() + " dx, round " + std::to_string(round)));
    }
  }
  const auto pc = cpu.parameters(), pg = gpu.parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (std::size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(all_close(pg[i]->grad, pc[i]->grad, tol, pc[i]->name + " grad"));
    EXPECT_TRUE(all_close(pg[i]->value, pc[i]->value, 0.0, pc[i]->name + " value (untouched)"));
  }
}

std::function<Tensor(int)> floats(const Shape& shape, double scale = 1.0) {
  return [shape, scale](int round) { return random_host(shape, 10 + static_cast<std::uint64_t>(round), scale); };
}

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

TEST(LayersGpu, LinearWithAndWithoutBias) {
  DTL_SKIP_WITHOUT_GPU();
  for (const bool bias : {true, false}) {
    Rng a(1), b(1);
    Linear cpu("fc", 48, 33, DType::kF32, a, 0.0, bias), gpu("fc", 48, 33, DType::kF32, b, 0.0, bias);
    if (bias) {  // a nonzero bias, so that the bias really goes in
      Rng r(2);
      for (float& v : cpu.bias().value.span<float>()) v = static_cast<float>(r.normal(0.0, 1.0));
      gpu.bias().value.copy_from(cpu.bias().value);
    }
    check_twins(cpu, gpu, floats({3, 8, 48}), kTol);
  }
}

TEST(LayersGpu, ReluAndGelu) {
  DTL_SKIP_WITHOUT_GPU();
  ReLU relu_cpu("relu"), relu_gpu("relu");
  check_twins(relu_cpu, relu_gpu, floats({7, 130}, 2.0), kTol);
  GELU gelu_cpu("gelu"), gelu_gpu("gelu");
  check_twins(gelu_cpu, gelu_gpu, floats({7, 130}, 2.0), kTol);
}

TEST(LayersGpu, LayerNormNarrowAndWideRows) {
  DTL_SKIP_WITHOUT_GPU();
  for (const std::int64_t c : {5, 32, 100}) {  // below, at and above one warp
    LayerNorm cpu("ln", c, DType::kF32), gpu("ln", c, DType::kF32);
    Rng r(3);
    for (float& v : cpu.parameters()[0]->value.span<float>()) v = static_cast<float>(r.normal(1.0, 0.3));
    for (float& v : cpu.parameters()[1]->value.span<float>()) v = static_cast<float>(r.normal(0.0, 0.3));
    gpu.parameters()[0]->value.copy_from(cpu.parameters()[0]->value);
    gpu.parameters()[1]->value.copy_from(cpu.parameters()[1]->value);
    check_twins(cpu, gpu, floats({2, 9, c}, 2.0), kTol);
  }
}

TEST(LayersGpu, EmbeddingsWithRepeatedTokens) {
  DTL_SKIP_WITHOUT_GPU();
  Rng a(4), b(4);
  Embedding cpu("wte", 7, 24, DType::kF32, a, 0.02), gpu("wte", 7, 24, DType::kF32, b, 0.02);
  // 3 x 10 tokens from a vocabulary of 7: every row of dW gets several rows of dy.
  check_twins(cpu, gpu, [](int round) { return random_tokens({3, 10}, 7, 20 + static_cast<std::uint64_t>(round)); },
              kTol);
  Rng c(5), d(5);
  PositionalEmbedding pcpu("wpe", 12, 24, DType::kF32, c, 0.02), pgpu("wpe", 12, 24, DType::kF32, d, 0.02);
  check_twins(pcpu, pgpu, floats({3, 10, 24}), kTol);  // T = 10 of a context of 12
}

TEST(LayersGpu, CausalSelfAttention) {
  DTL_SKIP_WITHOUT_GPU();
  // T = 37 > one warp, so a softmax row wraps around the lanes; hs = 8.
  Rng a(6), b(6);
  CausalSelfAttention cpu("attn", 32, 4, DType::kF32, a, 0.1, 0.1), gpu("attn", 32, 4, DType::kF32, b, 0.1, 0.1);
  check_twins(cpu, gpu, floats({2, 37, 32}), kTol);
}

TEST(LayersGpu, ResidualBlocks) {
  DTL_SKIP_WITHOUT_GPU();
  Rng a(7), b(7);
  auto cpu = make_mlp_block("mlp", 16, 64, Activation::kGELU, DType::kF32, a, 0.1, 0.1);
  auto gpu = make_mlp_block("mlp", 16, 64, Activation::kGELU, DType::kF32, b, 0.1, 0.1);
  check_twins(*cpu, *gpu, floats({2, 5, 16}), kTol);
  // The fused bias + GELU (kernels/bias_gelu.cu) against the unfused CPU block, with more
  // hidden columns (384) than threads in a block and more rows (66) than one warp.
  Rng e(9), f(9);
  auto wide_cpu = make_mlp_block("mlp", 96, 384, Activation::kGELU, DType::kF32, e, 0.1, 0.1);
  auto wide_gpu = make_mlp_block("mlp", 96, 384, Activation::kGELU, DType::kF32, f, 0.1, 0.1);
  check_twins(*wide_cpu, *wide_gpu, floats({2, 33, 96}), kTol);
  Rng c(8), d(8);
  auto acpu = make_attention_block("attn", 16, 2, DType::kF32, c, 0.1, 0.1);
  auto agpu = make_attention_block("attn", 16, 2, DType::kF32, d, 0.1, 0.1);
  check_twins(*acpu, *agpu, floats({2, 5, 16}), kTol);
}

TEST(LayersGpu, SoftmaxCrossEntropy) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t n = 40, v = 300;  // V > one block of 256 threads
  Tensor logits = random_host({4, 10, v}, 30, 3.0);
  const Tensor targets = random_tokens({4, 10}, v, 31);
  logits.data<float>()[5] = logits.data<float>()[77] = 40.0f;  // a tied maximum in row 0
  SoftmaxCrossEntropy cpu, gpu;
  const double loss_cpu = cpu.forward(logits, targets);
  const double loss_gpu = gpu.forward(logits.to(Device::kCuda), targets.to(Device::kCuda));
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-6 * loss_cpu);
  EXPECT_EQ(gpu.correct(), cpu.correct());
  EXPECT_TRUE(all_close(gpu.probs(), cpu.probs(), kTol, "probs"));
  EXPECT_TRUE(all_close(gpu.backward(0.25), cpu.backward(0.25), kTol, "dlogits"));
  // A target out of range is reported, as on the CPU.
  Tensor bad = targets.clone(MemoryCategory::kOther);
  bad.data<std::int32_t>()[n - 1] = static_cast<std::int32_t>(v);
  EXPECT_THROW(gpu.forward(logits.to(Device::kCuda), bad.to(Device::kCuda)), InvalidArgument);
}

// ---------------------------------------------------------------------------
// Dispatch, streams, accounting
// ---------------------------------------------------------------------------

TEST(LayersGpu, MixedDevicesAreRefusedNamingBoth) {
  DTL_SKIP_WITHOUT_GPU();
  Rng rng(9);
  Linear fc("fc", 4, 3, DType::kF32, rng);
  to_gpu(fc);
  try {
    fc.forward(random_host({2, 4}, 1));
    FAIL() << "a CPU input to a GPU layer was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cpu"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda"), std::string::npos) << what;
  }
  Rng r64(9);
  Linear fc64("fc64", 4, 3, DType::kF64, r64);
  to_gpu(fc64);
  EXPECT_THROW(fc64.forward(Tensor::zeros({2, 4}, DType::kF64, MemoryCategory::kOther, Device::kCuda)), InvalidArgument);
}

TEST(LayersGpu, OpsRunOnTheComputeStream) {
  DTL_SKIP_WITHOUT_GPU();
  // A non-blocking stream is not ordered after the legacy default stream: if any
  // op used another stream, this would read stale or unwritten memory.
  dtl::cuda::Stream stream;
  Rng a(10), b(10);
  auto cpu = make_attention_block("attn", 16, 2, DType::kF32, a, 0.1, 0.1);
  auto gpu = make_attention_block("attn", 16, 2, DType::kF32, b, 0.1, 0.1);
  ComputeStreamScope scope(stream.get());
  check_twins(*cpu, *gpu, floats({2, 6, 16}), kTol);
  EXPECT_EQ(compute_stream(), stream.get());
}

TEST(LayersGpu, ModelToDeviceMovesTheAccountedBytes) {
  DTL_SKIP_WITHOUT_GPU();
  MemoryTracker& gpu = memory_tracker(Device::kCuda);
  const std::int64_t params_before = gpu.current(MemoryCategory::kParameters);
  const std::int64_t grads_before = gpu.current(MemoryCategory::kGradients);
  const std::int64_t cpu_before = memory_tracker(Device::kCpu).current(MemoryCategory::kParameters);
  Model model = make_gpt(16, 8, 16, 2, 1, 1);
  const std::int64_t bytes = model.parameter_count() * 4;
  EXPECT_EQ(memory_tracker(Device::kCpu).current(MemoryCategory::kParameters) - cpu_before, bytes);
  model.to(Device::kCuda);
  EXPECT_EQ(gpu.current(MemoryCategory::kParameters) - params_before, bytes);
  EXPECT_EQ(gpu.current(MemoryCategory::kGradients) - grads_before, bytes);
  EXPECT_EQ(memory_tracker(Device::kCpu).current(MemoryCategory::kParameters), cpu_before);
  model.flatten_values();
  model.flatten_grads();
  EXPECT_EQ(model.flat_values().device(), Device::kCuda);
  EXPECT_EQ(gpu.current(MemoryCategory::kParameters) - params_before, bytes);  // moved, not copied
}

TEST(LayersGpu, ConvertBetweenF32F16AndBf16MatchesTheCpuBitForBit) {
  DTL_SKIP_WITHOUT_GPU();
  // Many magnitudes: subnormal and overflowing in f16, ties of both roundings.
  Tensor x = random_host({20000}, 60, 1000.0);
  for (std::int64_t i = 0; i < 200; ++i) x.data<float>()[i] *= 1e-7f;
  const Tensor x_dev = x.to(Device::kCuda);
  for (const DType half : {DType::kF16, DType::kBF16}) {
    const Tensor h_cpu = Tensor::zeros({20000}, half, MemoryCategory::kOther);
    const Tensor h_gpu = Tensor::zeros({20000}, half, MemoryCategory::kOther, Device::kCuda);
    convert(h_cpu, x);
    convert(h_gpu, x_dev);
    const Tensor h_back = h_gpu.to(Device::kCpu);
    ASSERT_EQ(std::memcmp(h_back.raw(), h_cpu.raw(), static_cast<std::size_t>(h_cpu.bytes())), 0) << dtype_name(half);
    const Tensor f_cpu = Tensor::zeros({20000}, DType::kF32, MemoryCategory::kOther);
    const Tensor f_gpu = Tensor::zeros({20000}, DType::kF32, MemoryCategory::kOther, Device::kCuda);
    convert(f_cpu, h_cpu);
    convert(f_gpu, h_gpu);
    EXPECT_TRUE(all_close(f_gpu, f_cpu, 0.0, std::string("back to f32 from ") + dtype_name(half)));
  }
  const Tensor f64_dev = Tensor::zeros({20000}, DType::kF64, MemoryCategory::kOther, Device::kCuda);
  EXPECT_THROW(convert(f64_dev, x_dev), InvalidArgument);
  EXPECT_THROW(convert(Tensor::zeros({20000}, DType::kF16, MemoryCategory::kOther), x_dev), InvalidArgument);
}

// ---------------------------------------------------------------------------
// Optimizers and whole training runs
// ---------------------------------------------------------------------------

TEST(LayersGpu, OptimizersStepADeviceSlice) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t count = 1000, begin = 300, len = 400;  // a shard in the middle of a flat buffer
  const Tensor p_host = random_host({count}, 40), g_host = random_host({count}, 41);
  const Tensor p_dev = p_host.to(Device::kCuda), g_dev = g_host.to(Device::kCuda);
  const Tensor q_host = p_host.clone(MemoryCategory::kOther), q_dev = p_host.to(Device::kCuda);
  Sgd sgd_cpu({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, len);
  Sgd sgd_gpu({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, len, Device::kCuda);
  AdamW adam_cpu({.lr = 0.01f, .weight_decay = 0.1f}, len);
  AdamW adam_gpu({.lr = 0.01f, .weight_decay = 0.1f}, len, Device::kCuda);
  for (int t = 0; t < 3; ++t) {
    sgd_cpu.step(p_host.view(begin, {len}), g_host.view(begin, {len}));
    sgd_gpu.step(p_dev.view(begin, {len}), g_dev.view(begin, {len}));
    adam_cpu.step(q_host.view(begin, {len}), g_host.view(begin, {len}));
    adam_gpu.step(q_dev.view(begin, {len}), g_dev.view(begin, {len}));
  }
  // Elementwise float math, FMA-contracted on the GPU: a few ulp.
  EXPECT_TRUE(all_close(p_dev, p_host, 1e-6, "SGD parameters (outside the slice: untouched)"));
  EXPECT_TRUE(all_close(q_dev, q_host, 1e-6, "AdamW parameters (outside the slice: untouched)"));
  EXPECT_TRUE(all_close(adam_gpu.v(), adam_cpu.v(), 1e-6, "AdamW v"));
  EXPECT_THROW(adam_gpu.step(q_host.view(begin, {len}), g_host.view(begin, {len})), InvalidArgument);
}

// Trains twin models, one per device, with SGD + momentum on flat buffers, and
// compares the loss of every step. SGD, not AdamW: AdamW divides by sqrt(v),
// which turns a gradient of float-noise size into a full step of lr, so two
// correct runs can part by lr on such elements; SGD keeps differences at the
// rounding level the tolerance is derived for.
void train_twins(Model cpu, Model gpu, const Tensor& input, const Tensor& targets, int steps) {
  gpu.to(Device::kCuda);
  cpu.flatten_values();
  cpu.flatten_grads();
  gpu.flatten_values();
  gpu.flatten_grads();
  const std::int64_t count = cpu.flat_values().numel();
  Sgd opt_cpu({.lr = 0.05f, .momentum = 0.9f}, count), opt_gpu({.lr = 0.05f, .momentum = 0.9f}, count, Device::kCuda);
  SoftmaxCrossEntropy ce_cpu, ce_gpu;
  const Tensor input_dev = input.to(Device::kCuda), targets_dev = targets.to(Device::kCuda);
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    cpu.zero_grad();
    gpu.zero_grad();
    const double loss_cpu = ce_cpu.forward(cpu.forward(input), targets);
    const double loss_gpu = ce_gpu.forward(gpu.forward(input_dev), targets_dev);
    ASSERT_NEAR(loss_gpu, loss_cpu, kTol * loss_cpu) << "step " << step;
    cpu.backward(ce_cpu.backward());
    gpu.backward(ce_gpu.backward());
    if (step == 0) {
      ASSERT_TRUE(all_close(gpu.flat_grads(), cpu.flat_grads(), kTol, "step 0 gradients"));
    }
    opt_cpu.step(cpu.flat_values(), cpu.flat_grads());
    opt_gpu.step(gpu.flat_values(), gpu.flat_grads());
    (step == 0 ? first : last) = loss_cpu;
  }
  EXPECT_LT(last, first);  // it did train
}

TEST(LayersGpu, MlpTrainingTracksTheCpu) {
  DTL_SKIP_WITHOUT_GPU();
  const Tensor x = random_host({32, 8}, 50);
  const Tensor y = random_tokens({32}, 5, 51);
  train_twins(make_mlp(8, 32, 5, 2, 1), make_mlp(8, 32, 5, 2, 1), x, y, 10);
}

TEST(LayersGpu, GptTrainingTracksTheCpu) {
  DTL_SKIP_WITHOUT_GPU();
  const Tensor tokens = random_tokens({4, 16}, 32, 52);
  const Tensor targets = random_tokens({4, 16}, 32, 53);
  train_twins(make_gpt(32, 16, 32, 4, 2, 1), make_gpt(32, 16, 32, 4, 2, 1), tokens, targets, 10);
}

// Note [Split backward] on the GPU: B then W (two slots, both B's before both
// W's) against backward() of a twin, both on the device: the same kernels on the
// same inputs, so equal bit for bit, with the GPT's MLP bias fused into its GELU
// (its bias gradient comes with B there).
TEST(LayersGpu, SplitBackwardEqualsTheFusedBitForBit) {
  DTL_SKIP_WITHOUT_GPU();
  Model fused = make_gpt(32, 16, 32, 4, 2, 1), split = make_gpt(32, 16, 32, 4, 2, 1);
  fused.to(Device::kCuda);
  split.to(Device::kCuda);
  fused.zero_grad();
  split.zero_grad();
  for (Model* model : {&fused, &split}) {
    std::vector<Tensor> dys;
    for (int slot = 0; slot < 2; ++slot) {
      model->set_slot(slot);
      const Tensor tokens = random_tokens({2, 16}, 32, 60 + static_cast<std::uint64_t>(slot)).to(Device::kCuda);
      const Tensor& y = model->forward(tokens);
      dys.push_back(random_host(y.shape(), 70 + static_cast<std::uint64_t>(slot)).to(Device::kCuda));
    }
    for (int slot = 0; slot < 2; ++slot) {
      model->set_slot(slot);
      if (model == &fused) {
        model->backward(dys[static_cast<std::size_t>(slot)]);
      } else {
        model->backward_input(dys[static_cast<std::size_t>(slot)]);  // token inputs: no dx to compare
      }
    }
    if (model == &split) {
      for (int slot = 0; slot < 2; ++slot) {
        model->set_slot(slot);
        model->backward_weight();
      }
    }
  }
  const std::vector<Parameter*> a = fused.parameters(), b = split.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    const Tensor ga = a[k]->grad.to(Device::kCpu), gb = b[k]->grad.to(Device::kCpu);
    EXPECT_EQ(std::memcmp(ga.raw(), gb.raw(), ga.bytes()), 0) << a[k]->name;
  }
}

}  // namespace
}  // namespace dtl::nn
