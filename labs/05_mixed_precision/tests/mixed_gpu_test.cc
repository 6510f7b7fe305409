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
// Without a GPU every test skips on every rank, saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/nn/cuda_ops.h"
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

}  // namespace
}  // namespace lab05_test
