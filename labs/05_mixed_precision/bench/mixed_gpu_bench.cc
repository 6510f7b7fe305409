// Lab 05 benchmark, the GPU rows (Note [The GPU step] in lab05/mixed.h): the
// gradient averaging of the Step rows' MLP over NCCL, 16-bit against fp32.
//
//   Gpu/nccl/<f16|bf16> buckets   allreduce_mean_half() (pre-divide) of every
//                     16-bit gradient bucket of the MLP on device buffers,
//                     beside an fp32 averaging allreduce (ReduceOp::kAvg) of the
//                     fp32 buckets, through the same NcclCommunicator; buckets
//                     as the trainer cuts them (MixedOptions::bucket_cap_bytes,
//                     default 25 MiB: the 16-bit and the fp32 gradients of this
//                     MLP fit one bucket each); each side ends when every bucket's
//                     Work::wait() returned (the host saw NCCL finish).
//                     err = max |16-bit average - exact| / max |exact|
//
// Ranks sharing one GPU (NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1) measure
// correctness and overheads, not a multi-GPU machine's bandwidth: on NVLink the
// 16-bit row would approach half the fp32 time for large buckets.
// Without a GPU or without NCCL no row is registered and rank 0 says why.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/cuda/check.h"
#include "harness/cuda/device.h"
#include "harness/error.h"
#include "harness/nn/half.h"
#include "harness/nn/model.h"
#include "harness/nn/tensor.h"
#include "harness/random.h"
#include "lab05/mixed.h"
#include "mixed_bench.h"

namespace dtl::lab05::mixed_bench {
namespace {

namespace nn = dtl::nn;
using dtl::bench::comm;

void say(const std::string& line) {
  if (comm().rank() == 0) std::printf("%s\n", line.c_str());
}

#ifdef DTL_HAVE_NCCL
dtl::Communicator& nccl() {
  static std::unique_ptr<dtl::Communicator> made = make_communicator("nccl", comm());
  return *made;
}

// Gradient-like values, different per rank: N(0, 1) x 2^(rank - 4).
std::vector<float> gradients(std::size_t n, int rank) {
  dtl::Rng rng(300 + static_cast<std::uint64_t>(rank));
  std::vector<float> g(n);
  for (float& v : g) v = static_cast<float>(rng.normal()) * std::ldexp(1.0f, rank - 4);
  return g;
}

// [offset, count) of each bucket of `n` elements of `element` bytes under `cap` bytes: the trainer's cut.
std::vector<std::pair<std::size_t, std::size_t>> buckets(std::size_t n, std::size_t element, std::size_t cap) {
  const std::size_t per = std::max<std::size_t>(1, cap / element);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t offset = 0; offset < n; offset += per) out.emplace_back(offset, std::min(per, n - offset));
  return out;
}

void gpu_comm_row(benchmark::State& state, dtl::DType dtype) {
  dtl::Communicator& c = nccl();
  const auto n = static_cast<std::size_t>(nn::make_mlp(kIn, kHidden, kClasses, kDepth, 1).parameter_count());
  const std::size_t cap = MixedOptions{}.bucket_cap_bytes;
  const auto half_buckets = buckets(n, 2, cap), f32_buckets = buckets(n, 4, cap);
  const std::vector<float> mine = gradients(n, c.rank());
  nn::Tensor host_f32 = nn::Tensor::zeros({static_cast<std::int64_t>(n)}, nn::DType::kF32, nn::MemoryCategory::kOther);
  std::copy(mine.begin(), mine.end(), host_f32.data<float>());
  nn::Tensor host_half = nn::Tensor::zeros(host_f32.shape(), dtype, nn::MemoryCategory::kOther);
  nn::convert(host_half, host_f32);
  const nn::Tensor d_half = host_half.to(nn::Device::kCuda), d_f32 = host_f32.to(nn::Device::kCuda);
  auto* half_bytes = static_cast<char*>(d_half.raw());
  auto* f32_bytes = static_cast<char*>(d_f32.raw());
  const auto run_half = [&] {
    for (const auto& [offset, count] : half_buckets) {
      allreduce_mean_half(c, half_bytes + offset * 2, count, dtype, DividePlacement::kPre);
    }
  };
  const auto run_f32 = [&] {
    for (const auto& [offset, count] : f32_buckets) {
      c.allreduce(f32_bytes + offset * 4, count, dtl::DType::kF32, dtl::ReduceOp::kAvg).wait();
    }
  };
  // The error of one 16-bit average, from fresh inputs, against the exact f64 average.
  run_half();
  const nn::Tensor got = d_half.to(nn::Device::kCpu);
  double worst = 0.0, top = 0.0;
  {
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < c.world_size(); ++r) {
      const std::vector<float> theirs = gradients(n, r);
      for (std::size_t i = 0; i < n; ++i) exact[i] += theirs[i] / static_cast<double>(c.world_size());
    }
    for (std::size_t i = 0; i < n; ++i) {
      const double v = dtype == dtl::DType::kF16 ? static_cast<double>(static_cast<float>(got.data<nn::f16>()[i]))
                                                 : static_cast<double>(static_cast<float>(got.data<nn::bf16>()[i]));
      worst = std::max(worst, std::abs(v - exact[i]));
      top = std::max(top, std::abs(exact[i]));
    }
  }
  dtl::bench::PairedTimer timer;
  for (auto _ : state) {
    // The values drift (averages of averages) but stay finite: the time does not depend on them.
    state.SetIterationTime(timer.time_pair(run_half, run_f32));
  }
  state.counters["impl_ms"] = timer.impl_median() * 1e3;
  state.counters["fp32_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["comm_ratio"] = timer.ratio_median();
  state.counters["bytes"] = static_cast<double>(n * 2);
  state.counters["err"] = std::isfinite(worst) ? worst / top : INFINITY;
}
#endif

void register_gpu_rows() {
  std::string why;
  int ok = dtl::cuda::gpu_count(&why) > 0 ? 1 : 0;
  int ok_all = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, comm()));
  if (!ok_all) {
    say("# GPU rows (Gpu/nccl/...): skipped — " + (ok ? std::string("another rank has no GPU") : why));
    return;
  }
#ifdef DTL_HAVE_NCCL
  DTL_CUDA_CHECK(cudaSetDevice(comm().rank() % dtl::cuda::gpu_count()));
  say("# Gpu/nccl rows: the MLP's gradient buckets averaged over NCCL on device buffers, 16-bit "
      "(allreduce_mean_half, pre-divide) vs fp32 (ReduceOp::kAvg); ranks sharing a GPU measure overheads, not bandwidth");
  for (const dtl::DType t : {dtl::DType::kF16, dtl::DType::kBF16}) {
    benchmark::RegisterBenchmark((std::string("Gpu/nccl/") + dtl::dtype_name(t) + " buckets").c_str(),
                                 [t](benchmark::State& s) { gpu_comm_row(s, t); })
        ->Iterations(dtl::bench::quick() ? 4 : 20)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
#else
  say("# GPU rows (Gpu/nccl/...): skipped — this build has no NCCL");
#endif
}

[[maybe_unused]] const bool registered = [] {
  dtl::bench::at_start(register_gpu_rows);
  return true;
}();

}  // namespace
}  // namespace dtl::lab05::mixed_bench
