// Lab 06 benchmark, GPU rows: the same sharded trainer (the reference's, or yours
// with --student) training on the GPU (f32, no offload), every gather and
// reduce-scatter NCCL's on a side stream (the handout's "On a GPU"). Registered
// only where every rank has a GPU and NCCL can run these ranks (2 ranks sharing one
// GPU: NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1, ../shared/gpu/README.md);
// otherwise one line says why.
//
//   Gpu/fsdp+prefetch1/nccl   FSDP with prefetch 1 (impl) paired with a plain DDP
//                             step on the same GPU (vendor column: flat buffers, one
//                             allreduce of the averaged gradients, AdamW), as the CPU
//                             rows pair a mode with DDP; ratio = FSDP / DDP per pair
//
// A step ends with a synchronize of the compute stream, so its time includes every
// kernel. The model is fsdp_bench.cc's MLP (units fc0..fc5 and head, 1.45 M
// parameters) with 768 rows per rank. Ranks that share one GPU share its SMs and
// memory bandwidth: their times measure the path and its overheads, not a
// multi-GPU machine's overlap.
#if DTL_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "harness/bench/bench.h"
#include "harness/comm/nccl_comm.h"
#include "harness/cuda/check.h"
#include "harness/cuda/device.h"
#include "harness/error.h"
#include "harness/nn/compute_stream.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"
#include "harness/testing/gpu_training.h"
#include "lab06/fsdp.h"

namespace {

namespace nn = dtl::nn;
namespace lab06 = dtl::lab06;
using dtl::bench::comm;

constexpr std::int64_t kIn = 256, kHidden = 512, kClasses = 10, kBatch = 768;
constexpr int kDepth = 6;
const nn::AdamWOptions kAdamW{.lr = 1e-3f, .weight_decay = 0.01f};

// Made by the first GPU row (a run filtered to other rows creates no NCCL
// communicator), freed at the end while MPI is still up.
std::unique_ptr<dtl::testing::GpuTraining> g_gpu;
int g_device = -1;

// This rank's batch, on the GPU.
struct Data {
  nn::Tensor x, y;
  Data() {
    dtl::Rng rng(7 + static_cast<std::uint64_t>(comm().rank()));
    nn::Tensor hx = nn::Tensor::zeros({kBatch, kIn}, nn::DType::kF32, nn::MemoryCategory::kActivations);
    nn::Tensor hy = nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kActivations);
    for (float& v : hx.span<float>()) v = static_cast<float>(rng.normal());
    for (auto& v : hy.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(kClasses));
    x = hx.to(nn::Device::kCuda);
    y = hy.to(nn::Device::kCuda);
  }
};

// The baseline, as fsdp_bench.cc's Ddp, on the GPU.
struct GpuDdp {
  dtl::Communicator& backend;
  nn::Model model = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1);
  nn::Tensor values, grads;
  std::unique_ptr<nn::AdamW> adam;
  nn::SoftmaxCrossEntropy ce;
  Data data;
  explicit GpuDdp(dtl::Communicator& c) : backend(c) {
    model.to(nn::Device::kCuda);
    values = model.flatten_values();
    grads = model.flatten_grads();
    backend.broadcast(values.raw(), static_cast<std::size_t>(values.numel()), dtl::DType::kF32, 0).wait();
    adam = std::make_unique<nn::AdamW>(kAdamW, values.numel(), nn::Device::kCuda);
  }
  void step() {
    model.zero_grad();
    ce.forward(model.forward(data.x), data.y);
    model.backward(ce.backward());
    backend.allreduce(grads.raw(), static_cast<std::size_t>(grads.numel()), dtl::DType::kF32, dtl::ReduceOp::kAvg)
        .wait();
    adam->step(values, grads);
    DTL_CUDA_CHECK(cudaStreamSynchronize(nn::compute_stream()));
  }
};

// The trainer under test, FSDP with prefetch 1.
struct GpuFsdp {
  nn::Model model = nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1);
  std::unique_ptr<lab06::ShardedTrainer> trainer;
  Data data;
  lab06::StepResult last;
  explicit GpuFsdp(dtl::Communicator& c) {
    model.to(nn::Device::kCuda);
    lab06::ShardedOptions options;
    options.mode = lab06::ShardingMode::kFsdp;
    options.optimizer = lab06::OptimizerKind::kAdamW;
    options.adamw = kAdamW;
    options.prefetch = 1;
    trainer = std::make_unique<lab06::ShardedTrainer>(c, model, options);
  }
  void step() {
    last = trainer->step(data.x, data.y);
    DTL_CUDA_CHECK(cudaStreamSynchronize(nn::compute_stream()));
  }
};

void fsdp_row(benchmark::State& state) {
  // Collective (every rank runs the same rows): the first GPU row makes the backend.
  if (!g_gpu) g_gpu = std::make_unique<dtl::testing::GpuTraining>(comm(), g_device);
  nn::ComputeStreamScope scope(g_gpu->compute_stream());
  GpuFsdp fsdp(g_gpu->backend());
  GpuDdp ddp(g_gpu->backend());
  fsdp.step();  // warm-up: cuBLAS handles, NCCL's first launches
  ddp.step();
  dtl::bench::PairedTimer timer;
  double exposed = 0.0;
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair([&] { fsdp.step(); }, [&] { ddp.step(); }));
    exposed += fsdp.last.exposed_seconds;
  }
  state.counters["step_ms"] = timer.impl_median() * 1e3;
  state.counters["vendor_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["exposed_ms"] = exposed / static_cast<double>(state.iterations()) * 1e3;
}

void say(const std::string& line) {
  if (comm().rank() == 0) std::printf("%s\n", line.c_str());
}

void register_rows() {
  g_device = dtl::testing::gpu_rows_device(comm(), "Gpu/fsdp+prefetch1/nccl");
  if (g_device < 0) return;
  say("# GPU rows: MLP of fsdp_bench.cc, batch " + std::to_string(kBatch) + " per rank, AdamW, on GPU " +
      std::to_string(g_device) + ", cpu:mpi-thread,cuda:nccl");
  benchmark::RegisterBenchmark("Gpu/fsdp+prefetch1/nccl", fsdp_row)
      ->Iterations(dtl::bench::quick() ? 5 : 20)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

[[maybe_unused]] const bool registered = [] {
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish([] { g_gpu.reset(); });
  return true;
}();

}  // namespace

#endif  // DTL_HAVE_NCCL
