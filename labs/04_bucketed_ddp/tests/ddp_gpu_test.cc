// Lab 04 on the GPU: your src/ (the same files as on the CPU) trains a model
// whose tensors live on the GPU, with its buckets allreduced by NCCL on a side
// stream, against the single-process CPU oracle of the CPU tests.
//
// The set-up (dtl::testing::GpuTraining), as the handout's "On a GPU: streams and
// events" draws it:
//   - one compute stream (a non-blocking cuda::Stream made the calling thread's
//     nn::compute_stream()): every layer, zero_grad and the optimizer step queue
//     their kernels there;
//   - the backend is a HostDeviceCommunicator: NCCL (NcclCommunicator, told the
//     compute stream) for device buffers, Open MPI for the host buffers of
//     check_model_agreement() (Note [Host and device buffers]);
//   - the Reducer issues a bucket from grad_ready, when the kernels of its last
//     gradient are queued; NCCL records `ready` on the compute stream there and
//     runs the allreduce after it on its side stream; finish() waits, and the
//     compute stream then waits for `done` before the optimizer step.
// The CPU stand-in of the same ordering, run everywhere, is stream_order_test.cc.
//
// SGD only: AdamW divides by sqrt(v), which turns float noise in a near-zero
// gradient into a step of lr, so a GPU run and a CPU run can part by lr on such
// elements (harness/nn/tests/layers_gpu_test.cc, train_twins()). The tolerance is
// the CPU tests' times 10: cuBLAS sums in another order than the CPU GEMM, on
// top of DDP's own reordering. A missing average (a factor W) or a bucket never
// reduced (O(1e-2)) is still far outside it.
//
// Every test decides together to skip (DTL_SKIP_IF_ANY): without a GPU, or where
// NCCL cannot run these ranks (2 ranks on one GPU need NCCL >= 2.30 and
// NCCL_MULTI_RANK_GPU_ENABLE=1: ../shared/gpu/README.md), every rank skips, saying why.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/cuda/device.h"
#include "harness/testing/gpu_training.h"
#include "labs/04_bucketed_ddp/tests/ddp_test_util.h"

namespace lab04_test {
namespace {

using lab04::ReducerMode;

#if DTL_HAVE_NCCL

inline constexpr dtl::testing::Tolerance kGpuTolerance{10 * kAbsTolerance, 10 * kRelTolerance};

#define SKIP_WITHOUT_NCCL_GPU()                                                       \
  std::string why_no_gpu;                                                             \
  const int gpus = dtl::cuda::gpu_count(&why_no_gpu);                                 \
  DTL_SKIP_IF_ANY(gpus == 0, "no GPU on some rank: " + why_no_gpu);                   \
  const auto placement = dtl::gpu_placement(comm());                                  \
  DTL_SKIP_IF_ANY(!placement.nccl_ok, "NCCL cannot run these ranks: " + placement.why_not)

// What gpu_ddp() saw while the model was alive (a freed device pointer is no longer one).
struct GpuRunInfo {
  std::size_t buckets = 0;       // the Reducer's buckets
  int device_allreduces = 0;     // allreduces of device memory that `backend` recorded
};

// ddp() of ddp_test_util.h with the model, the batches and the optimizer on the GPU.
std::vector<float> gpu_ddp(RecordingCommunicator& backend, const DdpRun& run, std::uint64_t seed,
                           GpuRunInfo* info) {
  const int rank = backend.rank(), size = backend.world_size();
  nn::Model model = make_model(run.model, seed + static_cast<std::uint64_t>(rank) * 1000);
  model.to(nn::Device::kCuda);
  model.flatten_values();
  lab04::broadcast_parameters(backend, model, 0);
  lab04::Reducer reducer(backend, model, with_buckets(model, run.reducer));
  info->buckets = reducer.buckets().size();
  nn::Sgd sgd({.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f}, model.parameter_count(), nn::Device::kCuda);
  nn::SoftmaxCrossEntropy ce;
  const std::int64_t b = kGlobalBatch / size;
  for (int step = 0; step < kSteps; ++step) {
    model.zero_grad();
    for (int m = 0; m < run.micro_steps; ++m) {
      const int data_step = step * run.micro_steps + m;
      const Batch batch = make_batch(run.model, data_step, kGlobalBatch, rank * b, (rank + 1) * b);
      const nn::Tensor x = batch.x.to(nn::Device::kCuda), y = batch.y.to(nn::Device::kCuda);
      if (m + 1 < run.micro_steps) {
        auto scope = reducer.no_sync();
        ce.forward(model.forward(x), y);
        model.backward(ce.backward());
      } else {
        ce.forward(model.forward(x), y);
        model.backward(ce.backward());
      }
    }
    reducer.finish();
    sgd.step(model.flat_values(), model.flat_grads());
  }
  for (const auto& op : backend.ops(dtl::CollectiveKind::kAllreduce)) {
    info->device_allreduces += dtl::cuda::is_device_pointer(op.send) ? 1 : 0;
  }
  const nn::Tensor host = model.flat_values().to(nn::Device::kCpu);
  const auto p = host.span<float>();
  return {p.begin(), p.end()};
}

struct GpuCase {
  ModelKind model;
  ReducerMode mode;
  int micro_steps;
};

class DdpGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(DdpGpu, MatchesTheSingleProcessCpuRun) {
  SKIP_WITHOUT_NCCL_GPU();
  const GpuCase c = GetParam();
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  RecordingCommunicator backend(gpu.backend());
  DdpRun run{.model = c.model, .opt = OptKind::kSgd, .micro_steps = c.micro_steps};
  run.reducer.mode = c.mode;
  const std::string what = std::string(model_name(c.model)) + ", " + lab04::reducer_mode_name(c.mode) + ", " +
                           std::to_string(c.micro_steps) + " micro-step(s), on " + gpu.backend().name();
  GpuRunInfo info;
  const std::vector<float> got = gpu_ddp(backend, run, 42, &info);
  EXPECT_TRUE(dtl::testing::close_to(single_process(c.model, OptKind::kSgd, 42, c.micro_steps), got, what,
                                     kGpuTolerance, "the single-process CPU run, batch " + std::to_string(kGlobalBatch)));
  // Every gradient allreduce went to NCCL, on device memory: one per bucket per step.
  EXPECT_EQ(info.device_allreduces, kSteps * static_cast<int>(info.buckets)) << what;
  EXPECT_EQ(backend.count(dtl::CollectiveKind::kAllreduce), info.device_allreduces)
      << what << ": an allreduce of host memory (gradients left on the CPU?)";
}

INSTANTIATE_TEST_SUITE_P(Nccl, DdpGpu,
                         ::testing::Values(GpuCase{ModelKind::kMlp, ReducerMode::kOverlapped, 1},
                                           GpuCase{ModelKind::kGpt, ReducerMode::kOverlapped, 1},
                                           GpuCase{ModelKind::kMlp, ReducerMode::kBucketed, 1},
                                           GpuCase{ModelKind::kMlp, ReducerMode::kNaive, 1},
                                           GpuCase{ModelKind::kGpt, ReducerMode::kOverlapped, 3}),
                         [](const ::testing::TestParamInfo<GpuCase>& param) {
                           return std::string(model_name(param.param.model)) + "_" +
                                  lab04::reducer_mode_name(param.param.mode) + "_" +
                                  std::to_string(param.param.micro_steps) + "micro";
                         });

// The parameters broadcast by NCCL from rank 0's device copy, bit for bit.
TEST(BroadcastParametersGpu, EveryRankGetsRankZerosParameters) {
  SKIP_WITHOUT_NCCL_GPU();
  dtl::testing::GpuTraining gpu(comm(), placement.device);
  nn::Model model = make_model(ModelKind::kMlp, 7 + static_cast<std::uint64_t>(comm().rank()));
  model.to(nn::Device::kCuda);
  model.flatten_values();
  lab04::broadcast_parameters(gpu.backend(), model, 0);
  const nn::Tensor host = model.flat_values().to(nn::Device::kCpu);
  const auto got = host.span<float>();
  const std::vector<float> want = initial_parameters(ModelKind::kMlp, 7);
  ASSERT_EQ(got.size(), want.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) wrong += got[i] == want[i] ? 0 : 1;
  EXPECT_EQ(wrong, 0u) << "elements differ from rank 0's on rank " << comm().rank();
}

#else

TEST(DdpGpu, NeedsNccl) { GTEST_SKIP() << "this build has no NCCL (cmake/README.md): lab 04's GPU path is off"; }

#endif  // DTL_HAVE_NCCL

}  // namespace
}  // namespace lab04_test
