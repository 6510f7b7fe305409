// Lab 05 on a GPU: the 16-bit pieces of the mixed step with dtl::nn_cuda's
// kernels against the CPU step.
//   - master -> working rounding: the GPU's float_to_f16 / float_to_bf16 of the
//     trainer's master weights equals the trainer's working copy bit for bit
//     (both round to nearest even);
//   - forward with the working weights: the MLP's logits computed on the GPU
//     (cuBLAS GEMM, bias, ReLU) from the trainer's 16-bit working copy, widened
//     here, agree with the CPU forward that the trainer's model runs within 1e-4
//     relative (+ 1e-5 absolute): the two sum the same products in different
//     orders in fp32. A trainer that leaves the model's compute copies stale
//     after a step (not widen(working)) fails it;
//   - the first Linear in 16 bits: the working weights and the batch rounded to
//     16 bits through cuBLAS's 16-bit GEMM with fp32 sums (nn::cuda::gemm_16)
//     equal the product of the widened values.
// Task C's tests: the trainer gets the test's rounding, averaging and scaler
// (oracle_hooks()), so only task C is graded here.
// The GPU step over NCCL (GpuNccl.*; Note [The GPU step] in lab05/mixed.h): the
// lab's own src/ files (all three tasks, no oracle hooks) on a model moved to the
// GPU, an NCCL backend and device batches, at 1 and 2 ranks (2 ranks share the
// one GPU: NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1):
//   - a few steps of fp16 (dynamic scaling) and bf16 stay within a stated
//     tolerance of the single-process fp32 CPU oracle (fp32_losses), with the
//     scale trajectory of the CPU test and bit-identical master weights;
//   - an inf injected into one rank's device gradients makes unscale_and_check()
//     return true on every rank (the one-element agreement allreduce), the
//     scale backs off identically, and the other ranks' unscaled values are the
//     CPU's; a trainer fed an overflowing batch on one rank skips that step on
//     every rank, its master weights unmoved.
// Without a GPU every test skips on every rank, saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/nn/cuda_ops.h"
#include "harness/nn/memory.h"
#include "labs/05_mixed_precision/tests/mixed_test_util.h"

namespace lab05_test {
namespace {

#define SKIP_WITHOUT_GPU()                                                      \
  std::string why_no_gpu;                                                       \
  const int gpus = dtl::cuda::gpu_count(&why_no_gpu);                           \
  DTL_SKIP_IF_ANY(gpus == 0, "no GPU on some rank: " + why_no_gpu);             \
  DTL_CUDA_CHECK(cudaSetDevice(comm().rank() % gpus))

// A device copy of host floats (freed by the caller's DeviceFloats).
struct DeviceFloats {
  float* ptr = nullptr;
  explicit DeviceFloats(std::size_t n) { DTL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(n, 1) * sizeof(float))); }
  DeviceFloats(const float* host, std::size_t n) : DeviceFloats(n) {
    // nn::cuda's kernels run on the legacy default stream (null): the copies go there too.
    dtl::cuda::copy(ptr, host, n * sizeof(float), nullptr);
  }
  ~DeviceFloats() { cudaFree(ptr); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

class GpuHalf : public ::testing::TestWithParam<lab05::Precision> {};
INSTANTIATE_TEST_SUITE_P(Types, GpuHalf, ::testing::Values(lab05::Precision::kF16, lab05::Precision::kBF16),
                         [](const auto& p) { return std::string(lab05::precision_name(p.param)); });

TEST_P(GpuHalf, WorkingCopyRoundsLikeTheGpu) {
  SKIP_WITHOUT_GPU();
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kMlp, 4);
  lab05::MixedOptions o;
  o.precision = GetParam();
  o.scaler = {.mode = lab05::ScalingMode::kStatic, .init_scale = 256.0f};
  o.hooks = oracle_hooks();
  lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
  for (int step = 0; step < 3; ++step) {
    const Batch b = rank_batch(ModelKind::kMlp, step, kGlobalBatch, comm().rank(), comm().size());
    trainer.step(b.x, b.y);
  }
  const auto master = trainer.master().span<float>();
  DeviceFloats d_master(master.data(), master.size());
  std::uint16_t* d_bits = nullptr;
  DTL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_bits), master.size() * sizeof(std::uint16_t)));
  const auto n = static_cast<std::int64_t>(master.size());
  if (GetParam() == lab05::Precision::kF16) nn::cuda::float_to_f16(d_bits, d_master.ptr, n);
  else nn::cuda::float_to_bf16(d_bits, d_master.ptr, n);
  std::vector<std::uint16_t> gpu(master.size());
  dtl::cuda::copy(gpu.data(), d_bits, gpu.size() * sizeof(std::uint16_t), nullptr);
  cudaFree(d_bits);
  std::vector<std::uint16_t> cpu(master.size());
  std::memcpy(cpu.data(), trainer.working().raw(), cpu.size() * sizeof(std::uint16_t));
  EXPECT_TRUE(dtl::testing::buffers_equal(cpu, gpu, "working copy (CPU) vs GPU rounding"));
}

TEST_P(GpuHalf, ForwardWithWorkingWeightsMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kMlp, 6);
  lab05::MixedOptions o;
  o.precision = GetParam();
  o.scaler = {.mode = lab05::ScalingMode::kNone};
  o.hooks = oracle_hooks();
  lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
  const Batch b0 = rank_batch(ModelKind::kMlp, 0, kGlobalBatch, comm().rank(), comm().size());
  trainer.step(b0.x, b0.y);
  // The CPU forward of the next batch: the model's compute values are widen(working).
  const Batch b = rank_batch(ModelKind::kMlp, 1, kGlobalBatch, comm().rank(), comm().size());
  const nn::Tensor& cpu_logits = model.forward(b.x);
  // The same on the GPU from the working copy: per Linear, y = x W^T + b, then ReLU
  // except for the head. The working copy is flat in parameter order.
  const std::vector<nn::Parameter*> params = model.parameters();  // fc0.w, fc0.b, fc1.w, fc1.b, head.w, head.b
  std::vector<float> widened(static_cast<std::size_t>(trainer.working().numel()));
  for (std::size_t i = 0; i < widened.size(); ++i) widened[i] = element(trainer.working(), static_cast<std::int64_t>(i));
  std::vector<const float*> host;  // each parameter's widened working weights
  for (std::size_t i = 0, offset = 0; i < params.size(); offset += static_cast<std::size_t>(params[i]->value.numel()), ++i) {
    host.push_back(widened.data() + offset);
  }
  std::int64_t rows = b.x.dim(0), width = b.x.dim(1);
  auto x = std::make_unique<DeviceFloats>(b.x.data<float>(), static_cast<std::size_t>(b.x.numel()));
  for (std::size_t layer = 0; layer < params.size() / 2; ++layer) {
    const nn::Tensor& w = params[2 * layer]->value;
    const nn::Tensor& bias = params[2 * layer + 1]->value;
    const std::int64_t out = w.dim(0);
    DeviceFloats d_w(host[2 * layer], static_cast<std::size_t>(w.numel()));
    DeviceFloats d_b(host[2 * layer + 1], static_cast<std::size_t>(bias.numel()));
    auto y = std::make_unique<DeviceFloats>(static_cast<std::size_t>(rows * out));
    nn::cuda::gemm(false, true, rows, out, width, 1.0f, x->ptr, width, d_w.ptr, width, 0.0f, y->ptr, out);
    nn::cuda::add_bias(y->ptr, d_b.ptr, rows, out);
    if (layer + 1 < params.size() / 2) nn::cuda::relu_forward(y->ptr, y->ptr, rows * out);
    x = std::move(y);
    width = out;
  }
  std::vector<float> gpu(static_cast<std::size_t>(rows * width));
  dtl::cuda::copy(gpu.data(), x->ptr, gpu.size() * sizeof(float), nullptr);
  const auto cpu = cpu_logits.span<float>();
  EXPECT_EQ(cpu.size(), gpu.size());
  for (std::size_t i = 0; i < std::min(gpu.size(), cpu.size()); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-5 + 1e-4 * std::abs(cpu[i])) << "logit " << i;
  }
}

// The first Linear in 16 bits, as a GPU step that computed in half precision would
// run it: the trainer's 16-bit working weights straight from its buffer (no
// widening), the batch rounded to 16 bits on the GPU, and cuBLAS's 16-bit GEMM with
// fp32 accumulation (nn::cuda::gemm_16). Each product of two 16-bit values is exact
// in fp32, so this equals the fp32 GEMM of the widened values up to the order of
// the sums: the bound of ForwardWithWorkingWeightsMatchesTheCpu.
TEST_P(GpuHalf, FirstLayerInSixteenBitsMatchesTheWidenedProduct) {
  SKIP_WITHOUT_GPU();
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kMlp, 7);
  lab05::MixedOptions o;
  o.precision = GetParam();
  o.scaler = {.mode = lab05::ScalingMode::kNone};
  o.hooks = oracle_hooks();
  lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
  const Batch b = rank_batch(ModelKind::kMlp, 0, kGlobalBatch, comm().rank(), comm().size());
  trainer.step(b.x, b.y);
  const nn::DType half = lab05::precision_dtype(GetParam());
  const nn::Tensor& w = model.parameters()[0]->value;  // fc0.weight (out, in): the first elements of working
  const std::int64_t rows = b.x.dim(0), in = b.x.dim(1), out = w.dim(0);
  // Device copies: x (rows, in) in f32, rounded there to 16 bits; W's 16-bit bits as they are.
  DeviceFloats d_x(b.x.data<float>(), static_cast<std::size_t>(b.x.numel()));
  std::uint16_t *d_x16 = nullptr, *d_w16 = nullptr;
  DTL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_x16), static_cast<std::size_t>(rows * in) * 2));
  DTL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_w16), static_cast<std::size_t>(out * in) * 2));
  dtl::cuda::copy(d_w16, trainer.working().raw(), static_cast<std::size_t>(out * in) * 2, nullptr);
  if (half == nn::DType::kF16) nn::cuda::float_to_f16(d_x16, d_x.ptr, rows * in);
  else nn::cuda::float_to_bf16(d_x16, d_x.ptr, rows * in);
  DeviceFloats d_y(static_cast<std::size_t>(rows * out));
  nn::cuda::gemm_16(false, true, rows, out, in, 1.0f, d_x16, in, d_w16, in, half, 0.0f, d_y.ptr, out, nn::DType::kF32);
  std::vector<float> gpu(static_cast<std::size_t>(rows * out));
  dtl::cuda::copy(gpu.data(), d_y.ptr, gpu.size() * sizeof(float), nullptr);
  cudaFree(d_x16);
  cudaFree(d_w16);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < out; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < in; ++p) {
        const float x16 = half == nn::DType::kF16 ? static_cast<float>(nn::f16(b.x.data<float>()[i * in + p]))
                                                  : static_cast<float>(nn::bf16(b.x.data<float>()[i * in + p]));
        want += static_cast<double>(x16) * element(trainer.working(), j * in + p);
      }
      EXPECT_NEAR(gpu[static_cast<std::size_t>(i * out + j)], want, 1e-5 + 1e-4 * std::abs(want))
          << "row " << i << " column " << j;
    }
  }
}

// ---------------------------------------------------------------------------
// The GPU step over NCCL
// ---------------------------------------------------------------------------

#ifdef DTL_HAVE_NCCL
#define SKIP_WITHOUT_NCCL()
#else
#define SKIP_WITHOUT_NCCL() DTL_SKIP_IF_ANY(true, "this build has no NCCL")
#endif

// The tolerance of a GPU loss against the fp32 CPU oracle: the CPU mixed step's
// (mixed_trainer_test.cc: 3e-4 fp16, 2e-3 bf16) doubled, because cuBLAS and the
// GPU kernels also sum in another order than the CPU layers (fp32 noise of
// ~1e-6 relative, which can move a 16-bit rounding by one ulp).
double gpu_tolerance(lab05::Precision p) { return p == lab05::Precision::kF16 ? 6e-4 : 4e-3; }

nn::Tensor on_gpu(const nn::Tensor& t) { return t.to(nn::Device::kCuda); }
std::vector<std::uint8_t> host_bytes(const nn::Tensor& t) { return bytes_of(t.to(nn::Device::kCpu)); }

struct GpuCase {
  ModelKind model;
  lab05::Precision precision;
};

TEST(GpuNccl, MixedStepsMatchOneFp32CpuProcess) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NCCL();
  constexpr int kSteps = 6;
  auto nccl = lab05::make_communicator("nccl", comm());
  for (const GpuCase c : {GpuCase{ModelKind::kMlp, lab05::Precision::kF16}, GpuCase{ModelKind::kGpt, lab05::Precision::kF16},
                          GpuCase{ModelKind::kMlp, lab05::Precision::kBF16}}) {
    const std::string what = std::string(model_name(c.model)) + " " + lab05::precision_name(c.precision);
    const std::vector<double> expected = fp32_losses(c.model, 3, kSteps);  // CPU, one process, fp32
    nn::Model model = make_model(c.model, 3 + static_cast<std::uint64_t>(comm().rank()) * 1000);
    model.to(nn::Device::kCuda);
    lab05::MixedOptions o;
    o.precision = c.precision;
    o.adamw = kAdamW;
    o.bucket_cap_bytes = 1000;  // several 16-bit buckets over NCCL
    if (c.precision == lab05::Precision::kF16) {
      o.scaler = {.mode = lab05::ScalingMode::kDynamic, .init_scale = 256.0f, .growth_interval = 2};
    } else {
      o.scaler = {.mode = lab05::ScalingMode::kNone};
      o.divide = lab05::DividePlacement::kPost;
    }
    lab05::MixedPrecisionTrainer trainer(*nccl, model, o);
    EXPECT_EQ(trainer.master().device(), nn::Device::kCuda) << what;
    EXPECT_EQ(trainer.grads().device(), nn::Device::kCuda) << what;
    double worst = 0.0;
    for (int step = 0; step < kSteps; ++step) {
      const Batch b = rank_batch(c.model, step, kGlobalBatch, comm().rank(), comm().size());
      const lab05::StepResult r = trainer.step(on_gpu(b.x), on_gpu(b.y));
      const float scale = c.precision == lab05::Precision::kF16 ? std::ldexp(1.0f, 8 + step / 2) : 1.0f;
      const double gap = std::abs(r.loss - expected[static_cast<std::size_t>(step)]);
      worst = std::max(worst, gap);
      EXPECT_EQ(r.scale, scale) << what << ", step " << step;
      EXPECT_FALSE(r.skipped) << what << ", step " << step;
      EXPECT_EQ(r.comm_bytes, static_cast<std::int64_t>(trainer.master().numel()) * 2) << what << ": 16-bit buckets";
      EXPECT_LE(gap, gpu_tolerance(c.precision)) << what << ", step " << step << ": loss " << r.loss
                                                 << ", fp32 CPU single process " << expected[static_cast<std::size_t>(step)];
    }
    EXPECT_TRUE(same_as_rank0(host_bytes(trainer.master()), what + " master weights"));
    if (comm().rank() == 0) {
      std::printf("[ info ] GPU %s at %d ranks: largest |loss - fp32 CPU loss| over %d steps = %.2e (tolerance %.0e)\n",
                  what.c_str(), comm().size(), kSteps, worst, gpu_tolerance(c.precision));
    }
  }
}

// An inf written straight into the last rank's device gradients: every rank's
// unscale_and_check() says "skip", by the one-element agreement; update() then
// backs the scale off to the same value everywhere.
TEST(GpuNccl, AnInjectedInfOnOneRankSkipsOnEveryRank) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NCCL();
  auto nccl = lab05::make_communicator("nccl", comm());
  const int last = comm().size() - 1;
  for (const nn::DType dtype : {nn::DType::kF16, nn::DType::kBF16}) {
    constexpr std::int64_t kCount = 1000;
    std::vector<double> values(kCount);
    for (std::int64_t i = 0; i < kCount; ++i) values[static_cast<std::size_t>(i)] = static_cast<double>((i % 37) - 18) * 4.0;
    if (comm().rank() == last) values[517] = std::numeric_limits<double>::infinity();
    const nn::Tensor host = nn::Tensor::from_values({kCount}, values, dtype, nn::MemoryCategory::kOther);
    const nn::Tensor grads = on_gpu(host);
    const nn::Tensor out = on_gpu(nn::Tensor::zeros({kCount}, nn::DType::kF32, nn::MemoryCategory::kOther));
    lab05::LossScaler scaler({.mode = lab05::ScalingMode::kDynamic, .init_scale = 1024.0f, .growth_interval = 3});
    const bool found = scaler.unscale_and_check(*nccl, grads, out);
    EXPECT_TRUE(found) << "rank " << comm().rank() << " (" << dtype_name(dtype) << "): rank " << last
                       << " holds an inf, so every rank must skip";
    scaler.update(found);
    EXPECT_EQ(scaler.scale(), 512.0f) << "rank " << comm().rank();
    EXPECT_EQ(scaler.skipped_steps(), 1) << "rank " << comm().rank();
    const float scale = scaler.scale();
    std::vector<std::uint8_t> scale_bytes(sizeof scale);
    std::memcpy(scale_bytes.data(), &scale, sizeof scale);
    EXPECT_TRUE(same_as_rank0(scale_bytes, "the scale after the backoff"));
    // The unscaled values are the CPU's: float(g) / 1024, exact (powers of two).
    const nn::Tensor back = out.to(nn::Device::kCpu);
    for (std::int64_t i = 0; i < kCount; ++i) {
      if (comm().rank() == last && i == 517) {
        EXPECT_TRUE(std::isinf(back.data<float>()[i]));
      } else {
        EXPECT_EQ(back.data<float>()[i], static_cast<float>(values[static_cast<std::size_t>(i)] / 1024.0)) << "element " << i;
      }
    }
    // A clean step afterwards: no rank skips, the scale stays.
    const nn::Tensor clean = on_gpu(nn::Tensor::from_values({kCount}, std::vector<double>(kCount, 2.0), dtype,
                                                            nn::MemoryCategory::kOther));
    const bool found_again = scaler.unscale_and_check(*nccl, clean, out);
    EXPECT_FALSE(found_again) << "rank " << comm().rank();
  }
}

// The trainer on the GPU, fed inputs of 1e6 on the last rank at step 2 (fp16
// overflows): every rank skips that step, its master weights keep every bit, and
// the scale follows 2^10 2^10 2^10(skip) 2^9 2^9 2^9 2^10 as on the CPU.
TEST(GpuNccl, AnOverflowingBatchOnOneRankSkipsTheTrainerStepOnEveryRank) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NCCL();
  auto nccl = lab05::make_communicator("nccl", comm());
  nn::Model model = make_model(ModelKind::kMlp, 9);
  model.to(nn::Device::kCuda);
  lab05::MixedOptions o;
  o.precision = lab05::Precision::kF16;
  o.adamw = kAdamW;
  o.scaler = {.mode = lab05::ScalingMode::kDynamic, .init_scale = 1024.0f, .growth_interval = 3};
  lab05::MixedPrecisionTrainer trainer(*nccl, model, o);
  const int last = comm().size() - 1;
  const std::vector<float> scales = {1024, 1024, 1024, 512, 512, 512, 1024};
  for (int step = 0; step < 7; ++step) {
    const Batch b = rank_batch(ModelKind::kMlp, step, kGlobalBatch, comm().rank(), comm().size(),
                               step == 2 && comm().rank() == last ? 1e6f : 1.0f);
    const std::vector<std::uint8_t> master = host_bytes(trainer.master());
    const lab05::StepResult r = trainer.step(on_gpu(b.x), on_gpu(b.y));
    EXPECT_EQ(r.scale, scales[static_cast<std::size_t>(step)]) << "rank " << comm().rank() << ", step " << step;
    EXPECT_EQ(r.skipped, step == 2) << "rank " << comm().rank() << ", step " << step;
    EXPECT_EQ(host_bytes(trainer.master()) == master, step == 2) << "rank " << comm().rank() << ", step " << step;
  }
  EXPECT_TRUE(same_as_rank0(host_bytes(trainer.master()), "master weights after the overflow"));
}

}  // namespace
}  // namespace lab05_test
