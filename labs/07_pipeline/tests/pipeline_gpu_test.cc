// Lab 07 on the GPU: your executor (the same src/stage.cc as on the CPU) with each
// stage's model, activations and gradients on the GPU, the activations and
// gradients crossing stages by ncclSend/ncclRecv (dtl::NcclPeerLink, one channel
// per direction: harness/comm/nccl_peer_link.h), GPipe and 1F1B, against the
// single-process CPU oracle of the CPU tests (pipeline_test_util.h, run_oracle()).
//
// The set-up is dtl::testing::GpuTraining (harness/testing/gpu_training.h): the
// device and the compute stream every layer runs on. The CPU stand-in of the
// streams' order, run everywhere, is stream_order_test.cc.
//
// Tolerance: the CPU tests' (close_to(): 2e-5 absolute + 1e-4 relative) times 10,
// as lab 06's GPU tests: cuBLAS sums in another order than the CPU GEMM, and
// SGD with momentum carries the difference over the steps. Losses: 1e-4 relative.
//
// Every test decides together to skip (DTL_SKIP_IF_ANY): without a GPU, or where
// NCCL cannot run these ranks (2 ranks on one GPU need NCCL >= 2.30 and
// NCCL_MULTI_RANK_GPU_ENABLE=1: ../shared/gpu/README.md), every rank skips, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/cuda/device.h"
#include "labs/07_pipeline/tests/gpu_action_timer.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

#if DTL_HAVE_NCCL
#include "harness/comm/nccl_peer_link.h"
#include "harness/testing/gpu_training.h"
#endif

namespace lab07_test {
namespace {

#if DTL_HAVE_NCCL

#define SKIP_WITHOUT_NCCL_GPU()                                                     \
  std::string why_no_gpu;                                                           \
  const int gpus = dtl::cuda::gpu_count(&why_no_gpu);                               \
  DTL_SKIP_IF_ANY(gpus == 0, "no GPU on some rank: " + why_no_gpu);                 \
  const auto placement = dtl::gpu_placement(comm());                                \
  DTL_SKIP_IF_ANY(!placement.nccl_ok, "NCCL cannot run these ranks: " + placement.why_not)

struct GpuCase {
  ModelKind model;
  Order order;
  int m;
  bool checkpoint;
};

std::string gpu_case_name(const GpuCase& c) {
  return std::string(model_name(c.model)) + "_" + order_name(c.order) + "_m" + std::to_string(c.m) +
         (c.checkpoint ? "_checkpoint" : "");
}

constexpr int kGpuSteps = 3;
constexpr std::int64_t kGpuBatch = 14;

struct GpuRun {
  std::vector<float> values;   // this stage's parameters afterwards (host copy)
  std::vector<double> losses;  // per step, on the last stage
  std::vector<double> bubbles; // per step, from CUDA events (without checkpointing)
  int begin = 0, end = 0;
};

GpuRun run_on_gpu(dtl::testing::GpuTraining& gpu, const GpuCase& c) {
  const int P = comm().size(), s = comm().rank();
  nn::Model whole = make_model(c.model, 3);
  const nn::Stage stage = stage_of(whole, even_cut(5, P), s, input_shape(c.model, kGpuBatch));
  nn::Model model = std::move(whole).slice(stage.begin, stage.end);
  model.to(nn::Device::kCuda);
  const nn::Tensor values = model.flatten_values();
  const nn::Tensor grads = model.flatten_grads();
  nn::Sgd sgd(kSgd, values.numel(), nn::Device::kCuda);
  dtl::NcclPeerLink link(comm(), gpu.compute_stream());
  lab07::PipelineOptions options;
  options.micro_batches = c.m;
  options.checkpoint = c.checkpoint;
  options.link = &link;
  lab07::PipelineStage pipe(comm(), std::move(model), stage, options);
  lab07_gpu::GpuActionTimer timer(pipe.model(), gpu.compute_stream(), 2 * c.m);
  const std::vector<Action> schedule = order_of(c.order, P, s, c.m);
  GpuRun run;
  run.begin = stage.begin;
  run.end = stage.end;
  for (int step = 0; step < kGpuSteps; ++step) {
    const Batch b = make_batch(c.model, step, kGpuBatch, 0, kGpuBatch);
    const nn::Tensor x = b.x.to(nn::Device::kCuda), y = b.y.to(nn::Device::kCuda);
    timer.begin_step();
    run.losses.push_back(pipe.train_step(x, y, schedule));
    const double bubble = timer.end_step();
    if (!c.checkpoint) run.bubbles.push_back(bubble);
    sgd.step(values, grads);
  }
  const nn::Tensor host = values.to(nn::Device::kCpu);
  const auto span = host.span<float>();
  run.values.assign(span.begin(), span.end());
  return run;
}

class PipelineGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(PipelineGpu, EqualsTheSingleProcessCpuRun) {
  SKIP_WITHOUT_NCCL_GPU();
  const GpuCase c = GetParam();
  const Oracle oracle = run_oracle(c.model, 3, kGpuSteps, kGpuBatch);
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  const GpuRun run = run_on_gpu(gpu, c);
  const int P = comm().size(), s = comm().rank();
  const std::vector<float> expected = unit_values(oracle.model, run.begin, run.end);
  ASSERT_EQ(run.values.size(), expected.size()) << "stage " << s;
  EXPECT_TRUE(close_to(expected, run.values, gpu_case_name(c) + ", stage " + std::to_string(s),
                       {10 * dtl::testing::Tolerance{}.abs, 10 * dtl::testing::Tolerance{}.rel}));
  if (s == P - 1) {
    for (int step = 0; step < kGpuSteps; ++step) {
      EXPECT_NEAR(run.losses[static_cast<std::size_t>(step)], oracle.losses[static_cast<std::size_t>(step)],
                  1e-4 * std::abs(oracle.losses[static_cast<std::size_t>(step)]))
          << gpu_case_name(c) << ", step " << step;
    }
  }
  // The events' bubble is a share of the step: in [0, 1), and 0 up to rounding at one stage.
  for (double bubble : run.bubbles) {
    EXPECT_GE(bubble, -1e-3) << gpu_case_name(c);
    EXPECT_LT(bubble, 1.0) << gpu_case_name(c);
    if (P == 1) {
      EXPECT_LT(bubble, 0.5) << gpu_case_name(c) << ": one stage never waits for a message";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nccl, PipelineGpu,
                         ::testing::Values(GpuCase{ModelKind::kMlp, Order::kGPipe, 1, false},
                                           GpuCase{ModelKind::kMlp, Order::kGPipe, 4, false},
                                           GpuCase{ModelKind::kMlp, Order::kOneFOneB, 5, false},
                                           GpuCase{ModelKind::kMlp, Order::kOneFOneB, 4, true},
                                           GpuCase{ModelKind::kGpt, Order::kOneFOneB, 4, false},
                                           GpuCase{ModelKind::kGpt, Order::kGPipe, 3, false}),
                         [](const ::testing::TestParamInfo<GpuCase>& param) { return gpu_case_name(param.param); });

// A message to a rank that is not a neighbour is refused, naming the peer and the rank.
TEST(PeerLinkGpu, NonNeighboursAndWrongOrdersAreErrors) {
  SKIP_WITHOUT_NCCL_GPU();
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  dtl::NcclPeerLink link(comm(), gpu.compute_stream());
  const int P = comm().size(), s = comm().rank();
  nn::Tensor a = nn::Tensor::zeros({4}, nn::DType::kF32, nn::MemoryCategory::kCommunication, nn::Device::kCuda);
  EXPECT_THROW(link.isend(a.raw(), 4, nn::DType::kF32, s, 0), dtl::InvalidArgument);  // itself
  if (P >= 3) {
    const int far = s == 0 ? 2 : 0;
    if (s != 1) {
      EXPECT_THROW(link.isend(a.raw(), 4, nn::DType::kF32, far, 0), dtl::InvalidArgument);
    }
  }
  if (P < 2) return;
  // Rank 0 sends tags 1 then 0 to rank 1, which receives 0 then 1: NCCL pairs 1 with 0.
  nn::Tensor b = nn::Tensor::zeros({4}, nn::DType::kF32, nn::MemoryCategory::kCommunication, nn::Device::kCuda);
  if (s == 0) {
    dtl::Work w1 = link.isend(a.raw(), 4, nn::DType::kF32, 1, 1);
    dtl::Work w0 = link.isend(b.raw(), 4, nn::DType::kF32, 1, 0);
    w1.wait();
    w0.wait();
  } else if (s == 1) {
    dtl::Work r0 = link.irecv(a.raw(), 4, nn::DType::kF32, 0, 0);
    dtl::Work r1 = link.irecv(b.raw(), 4, nn::DType::kF32, 0, 1);
    EXPECT_THROW(r0.wait(), dtl::Error);
    EXPECT_THROW(r1.wait(), dtl::Error);
  }
}

#else

TEST(PipelineGpu, NeedsNccl) { GTEST_SKIP() << "this build has no NCCL (cmake/README.md): lab 07's GPU path is off"; }

#endif  // DTL_HAVE_NCCL

}  // namespace
}  // namespace lab07_test
