// Lab 07 benchmark, GPU rows: the same stage executor (the reference's, or yours
// with --student) with every stage on the GPU, activations and gradients crossing
// stages by ncclSend/ncclRecv (dtl::NcclPeerLink, one channel per direction), the
// bubble measured from CUDA events on each stage's compute stream
// (tests/gpu_action_timer.h). Registered only where every rank has a GPU and NCCL
// can run these ranks (2-4 ranks sharing one GPU: NCCL >= 2.30 with
// NCCL_MULTI_RANK_GPU_ENABLE=1, ../shared/gpu/README.md); otherwise one line says why.
//
//   Gpu/gpipe/nccl, Gpu/1f1b/nccl   P = ranks stages of an MLP (8 units, 1024 wide,
//                                   batch 2048), m = 8 micro-batches, SGD
//
// Counters: step_ms (the step, host clock, ended by a synchronize of the compute
// stream), bubble (1 - busy / step from CUDA events, the largest over the stages),
// bubble_formula ((P - 1)/(m + P - 1), Note [The bubble]) and busy_ms (the largest
// stage's busy GPU time). Ranks that share one GPU share its SMs: their kernels
// run side by side, so the measured bubble is not a multi-GPU machine's; it shows
// the path and its waits. At 1 rank the bubble is the launch and loss overhead.
#if DTL_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/comm/nccl_peer_link.h"
#include "harness/cuda/check.h"
#include "harness/nn/compute_stream.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"
#include "harness/testing/gpu_training.h"
#include "lab07/pipeline.h"
#include "labs/07_pipeline/tests/gpu_action_timer.h"

namespace {

namespace nn = dtl::nn;
namespace lab07 = dtl::lab07;
using dtl::bench::comm;

constexpr std::int64_t kIn = 1024, kHidden = 1024, kClasses = 16, kBatch = 2048;
constexpr int kUnits = 8, kMicro = 8;

std::unique_ptr<dtl::testing::GpuTraining> g_gpu;
int g_device = -1;

void pipeline_row(benchmark::State& state, bool one_f_one_b) {
  if (!g_gpu) g_gpu = std::make_unique<dtl::testing::GpuTraining>(comm(), g_device);
  nn::ComputeStreamScope scope(g_gpu->compute_stream());
  const int P = comm().size(), s = comm().rank();
  nn::Model whole = nn::make_mlp(kIn, kHidden, kClasses, kUnits - 1, 1);
  const std::vector<nn::Stage> stages = whole.split_stages(P, {kBatch, kIn});
  const nn::Stage stage = stages[static_cast<std::size_t>(s)];
  nn::Model model = std::move(whole).slice(stage.begin, stage.end);
  model.to(nn::Device::kCuda);
  const nn::Tensor values = model.flatten_values(), grads = model.flatten_grads();
  nn::Sgd sgd({.lr = 1e-3f, .momentum = 0.9f}, values.numel(), nn::Device::kCuda);
  dtl::NcclPeerLink link(comm(), g_gpu->compute_stream());
  lab07::PipelineOptions options;
  options.micro_batches = kMicro;
  options.link = &link;
  lab07::PipelineStage pipe(comm(), std::move(model), stage, options);
  lab07_gpu::GpuActionTimer timer(pipe.model(), g_gpu->compute_stream(), 2 * kMicro);
  dtl::Rng rng(7);
  nn::Tensor hx = nn::Tensor::zeros({kBatch, kIn}, nn::DType::kF32, nn::MemoryCategory::kActivations);
  nn::Tensor hy = nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kActivations);
  for (float& v : hx.span<float>()) v = static_cast<float>(rng.normal());
  for (auto& v : hy.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(kClasses));
  const nn::Tensor x = hx.to(nn::Device::kCuda), y = hy.to(nn::Device::kCuda);
  // The flavor's own schedules (the reference's, or yours with --student), as the CPU rows.
  const std::vector<lab07::Action> schedule = one_f_one_b ? lab07::one_f_one_b_schedule(P, s, kMicro)
                                                          : lab07::gpipe_schedule(P, s, kMicro);
  auto step = [&] {
    timer.begin_step();
    pipe.train_step(x, y, schedule);
    const double bubble = timer.end_step();
    sgd.step(values, grads);
    DTL_CUDA_CHECK(cudaStreamSynchronize(g_gpu->compute_stream()));
    return bubble;
  };
  step();  // warm-up: cuBLAS handles, NCCL's first launches
  double bubble_sum = 0.0, busy_sum = 0.0;
  for (auto _ : state) {
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    const double t0 = dtl::clock_seconds();
    bubble_sum += step();
    busy_sum += timer.busy_seconds();
    double t = dtl::clock_seconds() - t0, slowest = 0.0;
    DTL_MPI_CHECK(MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm()));
    state.SetIterationTime(slowest);
  }
  const double n = static_cast<double>(state.iterations());
  double mine[2] = {bubble_sum / n, busy_sum / n}, worst[2] = {0.0, 0.0};
  DTL_MPI_CHECK(MPI_Allreduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, comm()));
  state.counters["bubble"] = worst[0];
  state.counters["busy_ms"] = worst[1] * 1e3;
  state.counters["bubble_formula"] = lab07::bubble_fraction(P, kMicro);
}

void register_rows() {
  g_device = dtl::testing::gpu_rows_device(comm(), "Gpu/gpipe/nccl, Gpu/1f1b/nccl");
  if (g_device < 0) return;
  if (comm().rank() == 0) {
    std::printf("# GPU rows: MLP of %d units, %lld wide, batch %lld, m = %d, on GPU %d, ncclSend/ncclRecv\n", kUnits,
                static_cast<long long>(kHidden), static_cast<long long>(kBatch), kMicro, g_device);
  }
  for (bool one_f_one_b : {false, true}) {
    benchmark::RegisterBenchmark(one_f_one_b ? "Gpu/1f1b/nccl" : "Gpu/gpipe/nccl",
                                 [one_f_one_b](benchmark::State& st) { pipeline_row(st, one_f_one_b); })
        ->Iterations(dtl::bench::quick() ? 5 : 20)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

[[maybe_unused]] const bool registered = [] {
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish([] { g_gpu.reset(); });
  return true;
}();

}  // namespace

#endif  // DTL_HAVE_NCCL
