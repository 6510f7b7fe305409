// Lab 04 benchmark, GPU rows: the same Reducer (the reference's, or yours with
// --student) training on the GPU, its buckets allreduced by NCCL on a side
// stream while backward's kernels run on the compute stream (the handout's "On a
// GPU: streams and events"). Registered only where every rank has a GPU and NCCL
// can run these ranks (2 ranks sharing one GPU: NCCL >= 2.30 with
// NCCL_MULTI_RANK_GPU_ENABLE=1, ../shared/gpu/README.md); otherwise one line says why.
//
//   Gpu/overlap/nccl   the overlapped step (impl) paired with the bucketed,
//                      non-overlapped step at the same 4 MiB cap (vendor column);
//                      ratio = overlapped / bucketed, median per pair
//
// A step is zero_grad, forward, backward, finish(), the optimizer step, and a
// synchronize of the compute stream (so its time includes every kernel). The
// model is ddp_bench.cc's MLP (3.4 M parameters, 13 MiB of gradients) with a
// larger batch, so that backward is long enough to hide something. Ranks that
// share one GPU share its SMs and its memory bandwidth: their times measure the
// path and its overheads, not a multi-GPU machine's overlap.
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
#include "lab04/ddp.h"

namespace {

namespace nn = dtl::nn;
namespace lab04 = dtl::lab04;
using dtl::bench::comm;

constexpr std::int64_t kIn = 256, kHidden = 1024, kClasses = 10, kBatch = 512;
constexpr int kDepth = 4;

// The device, the compute stream and the backend, made by the first GPU row (so that
// a run filtered to other rows, such as the graded one, creates no NCCL communicator)
// and kept for the whole run (at_finish frees them while MPI is still up).
std::unique_ptr<dtl::testing::GpuTraining> g_gpu;
int g_device = -1;

// One rank's training state on the GPU, as ddp_bench.cc's Trainer.
struct GpuTrainer {
  nn::Model model;
  std::unique_ptr<lab04::Reducer> reducer;
  std::unique_ptr<nn::Sgd> sgd;
  nn::Tensor x, y;
  nn::SoftmaxCrossEntropy ce;

  GpuTrainer(dtl::Communicator& backend, lab04::ReducerOptions options)
      : model(nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1)) {
    model.to(nn::Device::kCuda);
    model.flatten_values();
    lab04::broadcast_parameters(backend, model, 0);
    reducer = std::make_unique<lab04::Reducer>(backend, model, options);
    sgd = std::make_unique<nn::Sgd>(nn::SgdOptions{.lr = 1e-3f, .momentum = 0.9f}, model.parameter_count(),
                                    nn::Device::kCuda);
    dtl::Rng rng(7 + static_cast<std::uint64_t>(backend.rank()));
    nn::Tensor hx = nn::Tensor::zeros({kBatch, kIn}, nn::DType::kF32, nn::MemoryCategory::kActivations);
    nn::Tensor hy = nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kActivations);
    for (float& v : hx.span<float>()) v = static_cast<float>(rng.normal());
    for (auto& v : hy.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(kClasses));
    x = hx.to(nn::Device::kCuda);
    y = hy.to(nn::Device::kCuda);
  }

  void step() {
    model.zero_grad();
    ce.forward(model.forward(x), y);
    model.backward(ce.backward());
    reducer->finish();
    sgd->step(model.flat_values(), model.flat_grads());
    DTL_CUDA_CHECK(cudaStreamSynchronize(nn::compute_stream()));
  }
};

void overlap_row(benchmark::State& state) {
  // Collective (every rank runs the same rows): the first GPU row makes the backend.
  if (!g_gpu) g_gpu = std::make_unique<dtl::testing::GpuTraining>(comm(), g_device);
  nn::ComputeStreamScope scope(g_gpu->compute_stream());
  dtl::Communicator& backend = g_gpu->backend();
  const std::size_t cap = std::size_t{4} << 20;
  GpuTrainer overlapped(backend, {.mode = lab04::ReducerMode::kOverlapped, .bucket_cap_bytes = cap});
  GpuTrainer bucketed(backend, {.mode = lab04::ReducerMode::kBucketed, .bucket_cap_bytes = cap});
  overlapped.step();  // warm-up: cuBLAS handles, NCCL's first launch
  bucketed.step();
  dtl::bench::PairedTimer timer;
  double exposed = 0.0, comm_s = 0.0;
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair([&] { overlapped.step(); }, [&] { bucketed.step(); }));
    exposed += overlapped.reducer->last_step().exposed_seconds;
    comm_s += overlapped.reducer->last_step().comm_seconds;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["step_ms"] = timer.impl_median() * 1e3;
  state.counters["vendor_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["exposed_ms"] = exposed / n * 1e3;
  state.counters["comm_ms"] = comm_s / n * 1e3;
  state.counters["overlap"] = comm_s > 0 ? 100.0 * (1.0 - exposed / comm_s) : 0.0;
  state.counters["buckets"] = static_cast<double>(overlapped.reducer->buckets().size());
}

void say(const std::string& line) {
  if (comm().rank() == 0) std::printf("%s\n", line.c_str());
}

void register_rows() {
  g_device = dtl::testing::gpu_rows_device(comm(), "Gpu/overlap/nccl");
  if (g_device < 0) return;
  say("# GPU rows: MLP of ddp_bench.cc, batch " + std::to_string(kBatch) + " per rank, on GPU " +
      std::to_string(g_device) + ", cpu:mpi-thread,cuda:nccl");
  benchmark::RegisterBenchmark("Gpu/overlap/nccl", overlap_row)
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
