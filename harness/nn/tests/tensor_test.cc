// Tensor, Storage and the MemoryTracker: exact byte counts per category,
// views without copies, release and re-allocation, thread safety.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "harness/error.h"
#include "harness/nn/memory.h"
#include "harness/nn/tensor.h"

namespace dtl::nn {
namespace {

MemoryTracker& tracker() { return memory_tracker(Device::kCpu); }

TEST(MemoryTracker, CountsExactBytesPerCategoryAndFreesOnDestruction) {
  const MemorySnapshot before = tracker().snapshot();
  {
    const Tensor a = Tensor::zeros({3, 5}, DType::kF32, MemoryCategory::kParameters);   // 60 B
    const Tensor b = Tensor::zeros({7}, DType::kF64, MemoryCategory::kGradients);       // 56 B
    const Tensor c = Tensor::zeros({2, 3}, DType::kF16, MemoryCategory::kOptimizerState);  // 12 B
    const Tensor d = Tensor::zeros({5}, DType::kBF16, MemoryCategory::kActivations);    // 10 B
    const Tensor e = Tensor::zeros({3}, DType::kI32, MemoryCategory::kCommunication);   // 12 B
    const Tensor f = Tensor::zeros({1}, DType::kF32, MemoryCategory::kOther);           // 4 B
    EXPECT_EQ(tracker().current(MemoryCategory::kParameters) - before.current[0], 60);
    EXPECT_EQ(tracker().current(MemoryCategory::kGradients) - before.current[1], 56);
    EXPECT_EQ(tracker().current(MemoryCategory::kOptimizerState) - before.current[2], 12);
    EXPECT_EQ(tracker().current(MemoryCategory::kActivations) - before.current[3], 10);
    EXPECT_EQ(tracker().current(MemoryCategory::kCommunication) - before.current[4], 12);
    EXPECT_EQ(tracker().current(MemoryCategory::kOther) - before.current[5], 4);
    EXPECT_EQ(tracker().current_total() - before.current_total, 60 + 56 + 12 + 10 + 12 + 4);
    EXPECT_EQ(a.bytes(), 60);
    EXPECT_EQ(c.bytes(), 12);
  }
  const MemorySnapshot after = tracker().snapshot();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.current_total, before.current_total);
}

TEST(MemoryTracker, PeakIsTheHighestValueSinceReset) {
  tracker().reset_peak();
  const std::int64_t base = tracker().current(MemoryCategory::kActivations);
  const std::int64_t base_total = tracker().current_total();
  {
    Tensor a = Tensor::zeros({100}, DType::kF32, MemoryCategory::kActivations);  // +400
    {
      const Tensor b = Tensor::zeros({50}, DType::kF32, MemoryCategory::kActivations);  // +200: 600
    }
    const Tensor c = Tensor::zeros({25}, DType::kF32, MemoryCategory::kActivations);  // 500 now
    EXPECT_EQ(tracker().current(MemoryCategory::kActivations) - base, 500);
    EXPECT_EQ(tracker().peak(MemoryCategory::kActivations) - base, 600);
    EXPECT_EQ(tracker().peak_total() - base_total, 600);
    tracker().reset_peak();
    EXPECT_EQ(tracker().peak(MemoryCategory::kActivations) - base, 500);
  }
  EXPECT_EQ(tracker().current(MemoryCategory::kActivations), base);
}

TEST(MemoryTracker, PeakTotalIsThePeakOfTheSumNotTheSumOfPeaks) {
  tracker().reset_peak();
  const std::int64_t base_total = tracker().current_total();
  { const Tensor a = Tensor::zeros({100}, DType::kF32, MemoryCategory::kParameters); }
  { const Tensor b = Tensor::zeros({100}, DType::kF32, MemoryCategory::kGradients); }
  EXPECT_EQ(tracker().peak_total() - base_total, 400);
}

TEST(MemoryTracker, ThreadsAllocatingTogetherLoseNoCount) {
  const std::int64_t base = tracker().current(MemoryCategory::kCommunication);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) {
        const Tensor x = Tensor::zeros({i % 7 + 1}, DType::kF32, MemoryCategory::kCommunication);
      }
    });
  }
  std::vector<Tensor> kept;
  for (int i = 0; i < 100; ++i) kept.push_back(Tensor::zeros({3}, DType::kF32, MemoryCategory::kCommunication));
  for (auto& th : threads) th.join();
  EXPECT_EQ(tracker().current(MemoryCategory::kCommunication) - base, 100 * 12);
  kept.clear();
  EXPECT_EQ(tracker().current(MemoryCategory::kCommunication), base);
}

TEST(Storage, ReleaseAndAllocateKeepViewsBound) {
  const std::int64_t base = tracker().current(MemoryCategory::kParameters);
  const Tensor flat = Tensor::zeros({10}, DType::kF32, MemoryCategory::kParameters);
  const Tensor view = flat.view(4, {2, 3});
  EXPECT_EQ(tracker().current(MemoryCategory::kParameters) - base, 40);  // the view allocates nothing
  flat.storage()->release();
  EXPECT_EQ(tracker().current(MemoryCategory::kParameters) - base, 0);
  EXPECT_THROW(view.data<float>(), InvalidArgument);
  flat.storage()->allocate();
  EXPECT_EQ(tracker().current(MemoryCategory::kParameters) - base, 40);
  flat.span<float>()[5] = 2.5f;
  EXPECT_EQ(view.data<float>()[1], 2.5f);
  EXPECT_EQ(view.data<float>(), flat.data<float>() + 4);
}

TEST(Tensor, ZerosShapeAndDtype) {
  const Tensor t = Tensor::zeros({2, 3, 4}, DType::kF64, MemoryCategory::kOther);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.bytes(), 192);
  for (const double v : t.span<double>()) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(t.dim(3), InvalidArgument);
  EXPECT_THROW(t.data<float>(), InvalidArgument);  // wrong element type
  EXPECT_THROW(Tensor::zeros({-1}, DType::kF32, MemoryCategory::kOther), InvalidArgument);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(to_string(Shape{4, 64}), "(4, 64)");
}

TEST(Tensor, ViewsAndReshapeShareMemoryCloneDoesNot) {
  const std::vector<double> values{1, 2, 3, 4, 5, 6};
  const Tensor t = Tensor::from_values({2, 3}, values, DType::kF32);
  const Tensor r = t.reshape({3, 2});
  const Tensor v = t.view(2, {3});
  const Tensor c = t.clone(MemoryCategory::kOther);
  EXPECT_EQ(r.data<float>(), t.data<float>());
  EXPECT_EQ(v.data<float>(), t.data<float>() + 2);
  EXPECT_NE(c.data<float>(), t.data<float>());
  t.span<float>()[2] = 30.0f;
  EXPECT_EQ(v.span<float>()[0], 30.0f);
  EXPECT_EQ(r.span<float>()[2], 30.0f);
  EXPECT_EQ(c.span<float>()[2], 3.0f);
  EXPECT_THROW(t.view(4, {3}), InvalidArgument);
  EXPECT_THROW(t.reshape({4}), InvalidArgument);
  const Tensor d = Tensor::zeros({6}, DType::kF32, MemoryCategory::kOther);
  d.copy_from(t);
  EXPECT_EQ(d.span<float>()[5], 6.0f);
  EXPECT_THROW(d.copy_from(Tensor::zeros({6}, DType::kF64, MemoryCategory::kOther)), InvalidArgument);
}

TEST(Tensor, ConvertRoundsLikeHalfH) {
  const std::vector<double> values{1.0, 0.1, -65519.0, 70000.0, 1e-8, -0.0};
  const Tensor f32 = Tensor::from_values({6}, values, DType::kF32);
  const Tensor h = Tensor::zeros({2, 3}, DType::kF16, MemoryCategory::kOther);
  const Tensor b = Tensor::zeros({6}, DType::kBF16, MemoryCategory::kOther);
  convert(h, f32);
  convert(b, f32);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float x = f32.data<float>()[i];
    EXPECT_EQ(h.data<f16>()[i].bits, float_to_f16_bits(x)) << x;
    EXPECT_EQ(b.data<bf16>()[i].bits, float_to_bf16_bits(x)) << x;
  }
  EXPECT_EQ(h.data<f16>()[3].bits, 0x7c00);  // 70000 overflows fp16 to infinity
  const Tensor back = Tensor::zeros({6}, DType::kF64, MemoryCategory::kOther);
  convert(back, h);
  EXPECT_EQ(back.data<double>()[1], 0.0999755859375);  // fp16(0.1), exactly
  EXPECT_THROW(convert(Tensor::zeros({5}, DType::kF16, MemoryCategory::kOther), f32), InvalidArgument);
  EXPECT_THROW(convert(Tensor::zeros({6}, DType::kI32, MemoryCategory::kOther), f32), InvalidArgument);
}

TEST(Tensor, PinnedHostMemoryIsHostMemoryWithItsOwnTracker) {
  MemoryTracker& pinned = memory_tracker(Device::kPinnedHost);
  const MemorySnapshot cpu_before = tracker().snapshot(), pinned_before = pinned.snapshot();
  {
    const Tensor p = Tensor::zeros({10}, DType::kF32, MemoryCategory::kOptimizerState, Device::kPinnedHost);
    EXPECT_EQ(p.device(), Device::kPinnedHost);
    EXPECT_EQ(pinned.current(MemoryCategory::kOptimizerState) - pinned_before.current[2], 40);
    EXPECT_EQ(tracker().current_total(), cpu_before.current_total);  // nothing charged to kCpu
    p.span<float>()[3] = 2.5f;  // the CPU reads and writes it directly
    const Tensor c = p.to(Device::kCpu);  // same category, other tracker
    EXPECT_EQ(c.data<float>()[3], 2.5f);
    EXPECT_EQ(tracker().current(MemoryCategory::kOptimizerState) - cpu_before.current[2], 40);
    c.span<float>()[4] = -1.0f;
    p.copy_from(c);
    EXPECT_EQ(p.data<float>()[4], -1.0f);
    p.zero();
    EXPECT_EQ(p.data<float>()[3], 0.0f);
    const Tensor h = Tensor::zeros({10}, DType::kBF16, MemoryCategory::kCommunication, Device::kPinnedHost);
    convert(h, c);
    EXPECT_EQ(static_cast<float>(h.data<bf16>()[4]), -1.0f);
    p.storage()->release();
    EXPECT_EQ(pinned.current(MemoryCategory::kOptimizerState), pinned_before.current[2]);
  }
  EXPECT_EQ(pinned.current_total(), pinned_before.current_total);
  EXPECT_EQ(tracker().current_total(), cpu_before.current_total);
  EXPECT_STREQ(to_string(Device::kPinnedHost), "pinned");
}

TEST(Tensor, CudaTensorsNeedAGpuOrAreRefused) {
#ifndef DTL_HAVE_CUDA
  EXPECT_THROW(Tensor::zeros({4}, DType::kF32, MemoryCategory::kOther, Device::kCuda), InvalidArgument);
#else
  GTEST_SKIP() << "device tensors are exercised by nn_gpu_test where a GPU is present";
#endif
}

}  // namespace
}  // namespace dtl::nn
