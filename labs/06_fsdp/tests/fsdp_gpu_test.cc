// Lab 06 on the GPU: your sharded trainer (the same src/ as on the CPU) with the
// model, its FlatParameters, shards, gradient shards and optimizer state on the
// GPU, every gather and reduce-scatter NCCL's on a side stream, against the
// single-process CPU oracle of the CPU tests (fsdp_test_util.h).
//
// The set-up is dtl::testing::GpuTraining (harness/testing/gpu_training.h): the
// compute stream, and a backend that sends device buffers through NCCL and host
// ones through Open MPI. NCCL orders each collective after the kernels queued
// before its issue (an event on the compute stream) and the compute stream after
// it once it was waited for, so the trainer's issue and wait points are the whole
// story (handout, "On a GPU"); the CPU stand-in of that order, run everywhere, is
// stream_order_test.cc.
//
// f32 and SGD only: the 16-bit paths and offload are CPU-only in this lab (the
// constructor refuses them on a GPU model), and AdamW turns float noise in a
// near-zero gradient into a step of lr, so a GPU run and a CPU run can part by lr
// there (harness/nn/tests/layers_gpu_test.cc, train_twins()). The tolerance is the
// CPU tests' times 10: cuBLAS sums in another order than the CPU GEMM.
//
// Every test decides together to skip (DTL_SKIP_IF_ANY): without a GPU, or where
// NCCL cannot run these ranks (2 ranks on one GPU need NCCL >= 2.30 and
// NCCL_MULTI_RANK_GPU_ENABLE=1: ../shared/gpu/README.md), every rank skips, saying why.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/cuda/device.h"
#include "harness/testing/gpu_training.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;

#if DTL_HAVE_NCCL

#define SKIP_WITHOUT_NCCL_GPU()                                                       \
  std::string why_no_gpu;                                                             \
  const int gpus = dtl::cuda::gpu_count(&why_no_gpu);                                 \
  DTL_SKIP_IF_ANY(gpus == 0, "no GPU on some rank: " + why_no_gpu);                   \
  const auto placement = dtl::gpu_placement(comm());                                  \
  DTL_SKIP_IF_ANY(!placement.nccl_ok, "NCCL cannot run these ranks: " + placement.why_not)

struct GpuCase {
  ShardingMode mode;
  int prefetch;
  ModelKind model;
};

std::string gpu_case_name(const GpuCase& c) {
  return std::string(lab06::sharding_mode_name(c.mode)) + "_p" + std::to_string(c.prefetch) + "_" +
         model_name(c.model);
}

// Every unit's full values, its shards copied to the host and gathered with
// MPI_Allgather (the vendor collective), cut to the real elements, concatenated.
std::vector<float> gathered_from_device(const lab06::ShardedTrainer& trainer) {
  std::vector<float> out;
  const int size = comm().size();
  for (int u = 0; u < trainer.unit_count(); ++u) {
    const lab06::UnitState& st = trainer.unit(u);
    const nn::Tensor host = st.shard.to(nn::Device::kCpu);
    const auto mine = host.span<float>();
    std::vector<float> full(mine.size() * static_cast<std::size_t>(size));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, full.data(), static_cast<int>(mine.size()),
                  MPI_FLOAT, comm());
    const auto numel = std::min<std::size_t>(full.size(), static_cast<std::size_t>(st.layout.numel));
    out.insert(out.end(), full.begin(), full.begin() + static_cast<std::ptrdiff_t>(numel));
  }
  return out;
}

class FsdpGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(FsdpGpu, EqualsTheSingleProcessCpuRun) {
  SKIP_WITHOUT_NCCL_GPU();
  const GpuCase c = GetParam();
  const std::vector<float> expected = single_process(c.model, OptKind::kSgd, 5);
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  const int rank = comm().rank(), size = comm().size();
  std::vector<float> got;
  {
    nn::Model model = make_model(c.model, 5 + static_cast<std::uint64_t>(rank) * 1000);
    model.to(nn::Device::kCuda);
    lab06::ShardedTrainer trainer(gpu.backend(), model,
                                  options_for(c.mode, OptKind::kSgd, c.prefetch, test_layouts(model, size)));
    EXPECT_EQ(trainer.state_device(), nn::Device::kCuda);
    for (int step = 0; step < kSteps; ++step) {
      const Batch b = rank_batch(c.model, step, kGlobalBatch, rank, size);
      trainer.step(b.x.to(nn::Device::kCuda), b.y.to(nn::Device::kCuda));
    }
    got = gathered_from_device(trainer);
  }
  EXPECT_TRUE(close_to(expected, got, gpu_case_name(c) + " on " + gpu.backend().name(),
                       {10 * dtl::testing::Tolerance{}.abs, 10 * dtl::testing::Tolerance{}.rel}));
}

INSTANTIATE_TEST_SUITE_P(Nccl, FsdpGpu,
                         ::testing::Values(GpuCase{ShardingMode::kZero1, 0, ModelKind::kOddMlp},
                                           GpuCase{ShardingMode::kZero2, 1, ModelKind::kOddMlp},
                                           GpuCase{ShardingMode::kFsdp, 0, ModelKind::kOddMlp},
                                           GpuCase{ShardingMode::kFsdp, 1, ModelKind::kGpt},
                                           GpuCase{ShardingMode::kFsdp, 2, ModelKind::kGpt}),
                         [](const ::testing::TestParamInfo<GpuCase>& param) { return gpu_case_name(param.param); });

// The 16-bit paths and offload stay on the CPU: refused on a GPU model, on every rank.
TEST(FsdpGpuErrors, SixteenBitAndOffloadAreRefusedOnAGpuModel) {
  SKIP_WITHOUT_NCCL_GPU();
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  nn::Model model = make_model(ModelKind::kOddMlp, 5);
  model.to(nn::Device::kCuda);
  lab06::ShardedOptions half = options_for(ShardingMode::kFsdp, OptKind::kSgd, 0, test_layouts(model, comm().size()));
  half.param_dtype = nn::DType::kBF16;
  EXPECT_THROW(lab06::ShardedTrainer(gpu.backend(), model, half), dtl::InvalidArgument);
}

#else

TEST(FsdpGpu, NeedsNccl) { GTEST_SKIP() << "this build has no NCCL (cmake/README.md): lab 06's GPU path is off"; }

#endif  // DTL_HAVE_NCCL

}  // namespace
}  // namespace lab06_test
