// The CUDA building blocks (cuda_ops.h) against the CPU: cuBLAS GEMM in all
// four transpose combinations against a triple loop, the elementwise kernels
// against the CPU layers, the bias kernels against plain sums, and the device
// fp16/bf16 conversions against half.h, bit for bit (NaN payloads too); the
// 16-bit GEMM (cublasGemmEx, fp32 accumulation) against an fp32 GEMM of the
// widened inputs, and lab 05's 16-bit sum and unscale against half.h's
// arithmetic. Every test skips, saying why, where
// there is no GPU (CI); device tensors' memory accounting is checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/device.h"
#include "harness/error.h"
#include "harness/nn/cuda_ops.h"
#include "harness/nn/half.h"
#include "harness/nn/layers.h"
#include "harness/nn/tensor.h"

namespace dtl::nn {
namespace {

#define DTL_SKIP_WITHOUT_GPU()                               \
  do {                                                       \
    std::string why;                                         \
    if (dtl::cuda::gpu_count(&why) == 0) GTEST_SKIP() << why; \
  } while (0)

Tensor random_host(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kF32, MemoryCategory::kOther);
  for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(0.0, scale));
  return t;
}

TEST(NnGpu, DeviceTensorsAreAccountedAndCopyBothWays) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t before = memory_tracker(Device::kCuda).current(MemoryCategory::kActivations);
  const Tensor host = random_host({3, 5}, 1);
  {
    const Tensor device = Tensor::zeros({3, 5}, DType::kF32, MemoryCategory::kActivations, Device::kCuda);
    EXPECT_EQ(memory_tracker(Device::kCuda).current(MemoryCategory::kActivations) - before, 60);
    device.copy_from(host);
    const Tensor back = device.to(Device::kCpu);
    for (std::int64_t i = 0; i < 15; ++i) EXPECT_EQ(back.data<float>()[i], host.data<float>()[i]);
  }
  EXPECT_EQ(memory_tracker(Device::kCuda).current(MemoryCategory::kActivations), before);
}

TEST(NnGpu, GemmAllTransposesMatchTheTripleLoop) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t m = 33, n = 17, k = 45;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Tensor a = random_host(ta ? Shape{k, m} : Shape{m, k}, 2);
      const Tensor b = random_host(tb ? Shape{n, k} : Shape{k, n}, 3);
      const Tensor c = random_host({m, n}, 4);
      const Tensor da = a.to(Device::kCuda), db = b.to(Device::kCuda), dc = c.to(Device::kCuda);
      cuda::gemm(ta, tb, m, n, k, 0.5f, da.data<float>(), ta ? m : k, db.data<float>(), tb ? k : n, 2.0f,
                 dc.data<float>(), n);
      DTL_CUDA_CHECK(cudaDeviceSynchronize());
      const Tensor got = dc.to(Device::kCpu);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t p = 0; p < k; ++p)
            s += static_cast<double>(a.data<float>()[ta ? p * m + i : i * k + p]) * b.data<float>()[tb ? j * k + p : p * n + j];
          const double want = 0.5 * s + 2.0 * c.data<float>()[i * n + j];
          // TF32 is off by default for cublasSgemm, so float accuracy is expected.
          ASSERT_NEAR(got.data<float>()[i * n + j], want, 1e-4 * (1 + std::fabs(want))) << ta << tb;
        }
    }
  }
}

TEST(NnGpu, ActivationsMatchTheCpuLayers) {
  DTL_SKIP_WITHOUT_GPU();
  const Tensor x = random_host({64, 50}, 5, 2.0);
  const Tensor dy = random_host({64, 50}, 6);
  const std::int64_t count = x.numel();
  const Tensor dx_dev = x.to(Device::kCuda), ddy = dy.to(Device::kCuda);
  const Tensor out = Tensor::zeros({64, 50}, DType::kF32, MemoryCategory::kOther, Device::kCuda);
  const Tensor grad = Tensor::zeros({64, 50}, DType::kF32, MemoryCategory::kOther, Device::kCuda);
  for (const bool gelu : {false, true}) {
    std::unique_ptr<Layer> cpu;
    if (gelu) {
      cpu = std::make_unique<GELU>("gelu");
      cuda::gelu_forward(out.data<float>(), dx_dev.data<float>(), count);
      cuda::gelu_backward(grad.data<float>(), dx_dev.data<float>(), ddy.data<float>(), count);
    } else {
      cpu = std::make_unique<ReLU>("relu");
      cuda::relu_forward(out.data<float>(), dx_dev.data<float>(), count);
      cuda::relu_backward(grad.data<float>(), dx_dev.data<float>(), ddy.data<float>(), count);
    }
    DTL_CUDA_CHECK(cudaDeviceSynchronize());
    const Tensor& y_cpu = cpu->forward(x);
    const Tensor& dx_cpu = cpu->backward(dy, {});
    const Tensor y_gpu = out.to(Device::kCpu), g_gpu = grad.to(Device::kCpu);
    for (std::int64_t i = 0; i < count; ++i) {
      ASSERT_NEAR(y_gpu.data<float>()[i], y_cpu.data<float>()[i], 1e-6 * (1 + std::fabs(y_cpu.data<float>()[i])));
      ASSERT_NEAR(g_gpu.data<float>()[i], dx_cpu.data<float>()[i], 1e-6 * (1 + std::fabs(dx_cpu.data<float>()[i])));
    }
  }
}

TEST(NnGpu, BiasAddAndBiasGrad) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t rows = 70, cols = 33;
  const Tensor y = random_host({rows, cols}, 7), b = random_host({cols}, 8), db0 = random_host({cols}, 9);
  const Tensor dy = y.to(Device::kCuda), dbias = b.to(Device::kCuda), ddb = db0.to(Device::kCuda);
  cuda::add_bias(dy.data<float>(), dbias.data<float>(), rows, cols);
  cuda::bias_grad(ddb.data<float>(), dy.data<float>(), rows, cols);  // sums the biased y
  DTL_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor got_y = dy.to(Device::kCpu), got_db = ddb.to(Device::kCpu);
  for (std::int64_t j = 0; j < cols; ++j) {
    double sum = db0.data<float>()[j];
    for (std::int64_t i = 0; i < rows; ++i) {
      const double want = static_cast<double>(y.data<float>()[i * cols + j]) + b.data<float>()[j];
      ASSERT_NEAR(got_y.data<float>()[i * cols + j], want, 1e-6);
      sum += want;
    }
    ASSERT_NEAR(got_db.data<float>()[j], sum, 1e-4);
  }
}

TEST(NnGpu, DeviceConversionsMatchHalfH) {
  DTL_SKIP_WITHOUT_GPU();
  const Tensor x = random_host({100000}, 10, 1000.0);  // many magnitudes, subnormals and overflow included
  for (std::int64_t i = 0; i < 100; ++i) x.data<float>()[i] *= 1e-6f;
  // NaNs with payloads, infinities and ties: the kernels keep NaN payloads as half.h does.
  const std::uint32_t specials[] = {0x7f800001u, 0xffc12345u, 0x7fa00000u, 0x7f800000u, 0xff800000u,
                                    0x47800000u /* 65536 */, 0x477ff000u /* 65520: a tie, to inf */,
                                    0x3f808000u /* bf16 tie */, 0x33000000u /* 2^-25: a tie, to 0 */};
  for (std::size_t i = 0; i < std::size(specials); ++i) std::memcpy(x.data<float>() + 100 + i, &specials[i], 4);
  const Tensor dx = x.to(Device::kCuda);
  const Tensor out = Tensor::zeros({2 * x.numel()}, DType::kF16, MemoryCategory::kOther, Device::kCuda);
  auto* bits = static_cast<std::uint16_t*>(out.raw());
  cuda::float_to_f16(bits, dx.data<float>(), x.numel());
  cuda::float_to_bf16(bits + x.numel(), dx.data<float>(), x.numel());
  DTL_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor host = out.to(Device::kCpu);
  const auto* h = static_cast<const std::uint16_t*>(host.raw());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(h[i], float_to_f16_bits(x.data<float>()[i])) << x.data<float>()[i];
    ASSERT_EQ(h[x.numel() + i], float_to_bf16_bits(x.data<float>()[i])) << x.data<float>()[i];
  }
}

// 16-bit inputs, fp32 sums: every product of two 16-bit values is exact in fp32,
// so the result is an fp32 GEMM of the widened inputs up to the order of the
// sums (the bound of GemmAllTransposesMatchTheTripleLoop). A 16-bit C is that
// result rounded once: within half a 16-bit unit (plus the fp32 error).
TEST(NnGpu, SixteenBitGemmAccumulatesInFp32) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t m = 40, n = 24, k = 72;
  for (const DType half : {DType::kF16, DType::kBF16}) {
    for (const bool ta : {false, true}) {
      const Tensor a32 = random_host(ta ? Shape{k, m} : Shape{m, k}, 20), b32 = random_host({n, k}, 21);
      const Tensor a16 = Tensor::zeros(a32.shape(), half, MemoryCategory::kOther);
      const Tensor b16 = Tensor::zeros(b32.shape(), half, MemoryCategory::kOther);
      convert(a16, a32);
      convert(b16, b32);
      const Tensor aw = Tensor::zeros(a32.shape(), DType::kF32, MemoryCategory::kOther);  // widened back: exact
      const Tensor bw = Tensor::zeros(b32.shape(), DType::kF32, MemoryCategory::kOther);
      convert(aw, a16);
      convert(bw, b16);
      const Tensor da = a16.to(Device::kCuda), db = b16.to(Device::kCuda);
      const Tensor c32 = Tensor::zeros({m, n}, DType::kF32, MemoryCategory::kOther, Device::kCuda);
      const Tensor c16 = Tensor::zeros({m, n}, half, MemoryCategory::kOther, Device::kCuda);
      cuda::gemm_16(ta, true, m, n, k, 1.0f, da.raw(), ta ? m : k, db.raw(), k, half, 0.0f, c32.raw(), n, DType::kF32);
      cuda::gemm_16(ta, true, m, n, k, 1.0f, da.raw(), ta ? m : k, db.raw(), k, half, 0.0f, c16.raw(), n, half);
      DTL_CUDA_CHECK(cudaDeviceSynchronize());
      const Tensor got32 = c32.to(Device::kCpu), got16 = c16.to(Device::kCpu);
      const Tensor got16w = Tensor::zeros({m, n}, DType::kF32, MemoryCategory::kOther);
      convert(got16w, got16);
      const double unit = half == DType::kF16 ? 0x1p-10 : 0x1p-7;  // 16-bit spacing relative to the value
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (std::int64_t p = 0; p < k; ++p)
            want += static_cast<double>(aw.data<float>()[ta ? p * m + i : i * k + p]) * bw.data<float>()[j * k + p];
          ASSERT_NEAR(got32.data<float>()[i * n + j], want, 1e-4 * (1 + std::fabs(want))) << dtype_name(half) << ta;
          ASSERT_NEAR(got16w.data<float>()[i * n + j], want, (unit / 2) * std::fabs(want) + 1e-4 * (1 + std::fabs(want)))
              << dtype_name(half) << ta;
        }
    }
  }
  EXPECT_THROW(cuda::gemm_16(false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, DType::kF32, 0.0f, nullptr, 1,
                             DType::kF32),
               InvalidArgument);
}

// Lab 05's 16-bit elementwise steps against half.h's arithmetic (reduce_half_sum's
// and unscale_and_check's loops in reference/05_mixed_precision), bit for bit.
TEST(NnGpu, LabFiveHalfSumAndUnscaleMatchTheCpu) {
  DTL_SKIP_WITHOUT_GPU();
  const std::int64_t count = 5000;
  const Tensor x = random_host({count}, 30, 300.0), z = random_host({count}, 31, 300.0);
  for (const DType half : {DType::kF16, DType::kBF16}) {
    const bool f16 = half == DType::kF16;
    const Tensor a = Tensor::zeros({count}, half, MemoryCategory::kOther);
    const Tensor b = Tensor::zeros({count}, half, MemoryCategory::kOther);
    convert(a, x);
    convert(b, z);
    auto* pb = static_cast<std::uint16_t*>(b.raw());
    pb[0] = f16 ? 0x7c00u : 0x7f80u;  // an inf: the unscale must report it
    const Tensor da = a.to(Device::kCuda), db = b.to(Device::kCuda);
    cuda::half_sum(half, static_cast<const std::uint16_t*>(da.raw()), static_cast<std::uint16_t*>(db.raw()), count);
    const Tensor out = Tensor::zeros({count}, DType::kF32, MemoryCategory::kOther, Device::kCuda);
    const Tensor flags = Tensor::zeros({2}, DType::kI32, MemoryCategory::kOther, Device::kCuda);
    const float inv = 1.0f / 1024.0f;
    cuda::unscale_16(half, out.data<float>(), static_cast<const std::uint16_t*>(db.raw()), inv, count,
                     flags.data<std::int32_t>());
    cuda::unscale_16(half, out.data<float>() + 1, static_cast<const std::uint16_t*>(db.raw()) + 1, inv, count - 1,
                     flags.data<std::int32_t>() + 1);  // the same without the inf: no flag
    DTL_CUDA_CHECK(cudaDeviceSynchronize());
    const Tensor sum = db.to(Device::kCpu), unscaled = out.to(Device::kCpu), found = flags.to(Device::kCpu);
    const auto* pa = static_cast<const std::uint16_t*>(a.raw());
    const auto* ps = static_cast<const std::uint16_t*>(sum.raw());
    for (std::int64_t i = 0; i < count; ++i) {
      const float wa = f16 ? f16_bits_to_float(pa[i]) : bf16_bits_to_float(pa[i]);
      const float wb = f16 ? f16_bits_to_float(pb[i]) : bf16_bits_to_float(pb[i]);
      const std::uint16_t want = f16 ? float_to_f16_bits(wa + wb) : float_to_bf16_bits(wa + wb);
      ASSERT_EQ(ps[i], want) << dtype_name(half) << " element " << i;
      const float ws = f16 ? f16_bits_to_float(want) : bf16_bits_to_float(want);
      ASSERT_EQ(unscaled.data<float>()[i], ws * inv) << dtype_name(half) << " element " << i;
    }
    EXPECT_EQ(found.data<std::int32_t>()[0], 1) << dtype_name(half);
    EXPECT_EQ(found.data<std::int32_t>()[1], 0) << dtype_name(half);
  }
}

}  // namespace
}  // namespace dtl::nn
