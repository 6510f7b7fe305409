// Lab 03, part 2 benchmark: the GPU rows of lab03_bench (the CPU rows are in
// ring_bench.cc; both link the one MPI benchmark main).
//
// Rows (float, times from CUDA events, medians over the row's iterations):
//   GpuReduceCopy/<size>     dst = a + b on `size` bytes per operand, 1 MiB .. 1 GiB
//                            by 4x (quick: 1, 64, 256 MiB). Beside it, on the same
//                            buffers: the plain copy kernel (copy_device, the
//                            roofline) and cudaMemcpyAsync device to device.
//                            time = the reduce-copy; vendor = the roofline time, the
//                            reduce-copy's bytes (read a and b, write dst: 3 size) at
//                            the copy kernel's bandwidth; ratio = time / roofline
//                            (target for the reference: <= 1/0.85 = 1.18 at >= 256 MiB);
//                            algbw = busbw = the reduce-copy's bytes / time.
//   GpuVirtualRing/P<p>/<size>  virtual_ring_allreduce (fused) over p buffers of
//                            `size` bytes on one GPU, p = 2, 4, 8, 1 MiB .. 256 MiB.
//                            vendor = its roofline: virtual_ring_traffic_bytes() at
//                            the copy kernel's bandwidth (measured on the row's own
//                            footprint); ratio = time / roofline (target <= 1/0.7 =
//                            1.43); algbw = size / time, busbw = algbw 2(p-1)/p
//                            (nccl-tests' allreduce factor); #wrong checked once
//                            against the host sum, before timing.
//   GpuVirtualRingGraph/P<p>/<size>  the same ring as a VirtualRingGraph: its launches
//                            captured once, replayed with one cudaGraphLaunch per
//                            sample (Note [Fewer launches]); the same columns.
//   GpuIpcRing/<size>        IpcRing::allreduce (fused) across the MPI ranks, each on
//                            device (rank on its host) % GPUs, beside ncclAllReduce
//                            when NCCL can run these ranks (one GPU per rank, or NCCL
//                            2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1); otherwise the
//                            vendor column is empty and a line says why. #wrong
//                            checked once against the closed-form sum, before timing.
//   GpuIpcRingFlags/<size>   the same with task G2's step flags (IpcSync::kFlags): the
//                            streams wait on the neighbours' flags, the host queues the
//                            call and synchronizes its stream once; the same columns.
// Single-GPU rows run on rank 0 only (the other ranks would share its GPU and
// disturb it); rank 0 broadcasts each sample so that every rank records it.
// Footprints: every row rotates through enough buffer sets to touch at least
// 4x the L2 cache per round, so no sample is served from L2.
// Without a GPU (CI), no GPU row is registered and rank 0 prints one line:
// "GPU tables: skipped — <reason>".
#if DTL_LAB_HAS_CUDA
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/comm/mpi_comm.h"
#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"
#if DTL_HAVE_NCCL
#include "harness/comm/nccl_comm.h"
#endif

namespace {

using dtl::bench::comm;
namespace lab = dtl::lab03;
using dtl::cuda::DeviceBuffer;
using dtl::cuda::Event;
using dtl::cuda::Stream;

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Gpu {
  int device = 0;
  std::size_t l2_bytes = 0;
  std::string name;
};
Gpu g_gpu;

// One line of the summary printed at the end (rank 0).
struct Summary {
  std::string row;
  double impl_gbps, copy_gbps, memcpy_gbps, share;  // share: of the roofline, 0..1
  const char* target;
};
std::vector<Summary> g_summary;

// How many sets of `set_bytes` make a round of at least 4x L2.
std::size_t sets_for(std::size_t set_bytes) {
  return std::max<std::size_t>(1, (4 * g_gpu.l2_bytes + set_bytes - 1) / set_bytes);
}

// Times `fn` (work enqueued on `stream`) with events; seconds.
double time_on(cudaStream_t stream, const std::function<void()>& fn) {
  Event start, stop;
  start.record(stream);
  fn();
  stop.record(stream);
  return dtl::cuda::elapsed_seconds(start, stop);
}

// Rank 0 measures, everyone records: the sample travels by MPI_Bcast.
double shared_sample(const std::function<double()>& measure) {
  double t = comm().rank() == 0 ? measure() : 0.0;
  DTL_MPI_CHECK(MPI_Bcast(&t, 1, MPI_DOUBLE, 0, comm()));
  return t;
}

void fill(float* device, std::size_t count, int seed, cudaStream_t stream) {
  std::vector<float> host(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 33) - 16);
  dtl::cuda::upload(device, std::span<const float>(host), stream);
}

// ---------------------------------------------------------------------------
// GpuReduceCopy/<size>
// ---------------------------------------------------------------------------

void reduce_copy_row(benchmark::State& state, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);
  std::vector<double> t_impl, t_copy, t_memcpy;
  std::vector<DeviceBuffer> a, b, dst;
  std::optional<Stream> stream;
  std::size_t sets = sets_for(3 * bytes);
  if (comm().rank() == 0) {
    DTL_CUDA_CHECK(cudaSetDevice(g_gpu.device));
    stream.emplace();
    for (std::size_t s = 0; s < sets; ++s) {
      a.emplace_back(bytes);
      b.emplace_back(bytes);
      dst.emplace_back(bytes);
      fill(static_cast<float*>(a.back().data()), count, 1, stream->get());
      fill(static_cast<float*>(b.back().data()), count, 2, stream->get());
    }
  }
  std::size_t it = 0;
  for (auto _ : state) {
    const std::size_t s = it++ % std::max<std::size_t>(sets, 1);
    auto args = [&] {
      lab::ReduceCopyArgs<float> r;
      r.dst = static_cast<float*>(dst[s].data());
      r.a = static_cast<const float*>(a[s].data());
      r.b = static_cast<const float*>(b[s].data());
      r.count = count;
      return r;
    };
    t_impl.push_back(shared_sample([&] { return time_on(stream->get(), [&] { lab::reduce_copy(args(), stream->get()); }); }));
    t_copy.push_back(shared_sample([&] {
      return time_on(stream->get(), [&] { lab::copy_device(dst[s].data(), a[s].data(), bytes, stream->get()); });
    }));
    t_memcpy.push_back(shared_sample([&] {
      return time_on(stream->get(), [&] {
        DTL_CUDA_CHECK(cudaMemcpyAsync(dst[s].data(), b[s].data(), bytes, cudaMemcpyDeviceToDevice, stream->get()));
      });
    }));
    state.SetIterationTime(t_impl.back());
  }
  const double impl = dtl::bench::median(t_impl), copy = dtl::bench::median(t_copy),
               memcpy_t = dtl::bench::median(t_memcpy);
  const double traffic = 3.0 * static_cast<double>(bytes);
  const double copy_gbps = 2.0 * static_cast<double>(bytes) / copy * 1e-9;
  const double roofline = traffic / (copy_gbps * 1e9);
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["count"] = static_cast<double>(count);
  state.counters["type"] = sizeof(float);
  state.counters["time_us"] = impl * 1e6;
  state.counters["vendor_us"] = roofline * 1e6;
  state.counters["algbw"] = traffic / impl * 1e-9;
  state.counters["busbw"] = traffic / impl * 1e-9;
  state.counters["wrong"] = 0;
  state.counters["ratio"] = impl / roofline;
  state.counters["copy_GBps"] = copy_gbps;
  state.counters["memcpy_GBps"] = 2.0 * static_cast<double>(bytes) / memcpy_t * 1e-9;
  g_summary.push_back({"GpuReduceCopy/" + dtl::format_bytes(bytes), traffic / impl * 1e-9, copy_gbps,
                       2.0 * static_cast<double>(bytes) / memcpy_t * 1e-9, roofline / impl,
                       bytes >= 256 * kMiB ? ">= 85% of copy" : "-"});
}

// ---------------------------------------------------------------------------
// GpuVirtualRing/P<p>/<size>
// ---------------------------------------------------------------------------

void virtual_ring_row(benchmark::State& state, int p, std::size_t bytes, bool graph) {
  const std::size_t count = bytes / sizeof(float);
  const auto up = static_cast<std::size_t>(p);
  const std::size_t sets = sets_for(up * bytes);
  std::vector<std::vector<DeviceBuffer>> bufs(sets);
  std::vector<std::vector<float*>> ptrs(sets);
  DeviceBuffer copy_src, copy_dst;
  std::optional<Stream> stream;
  std::vector<std::unique_ptr<lab::VirtualRingGraph<float>>> graphs;  // one per buffer set (graph rows)
  double wrong = 0;
  if (comm().rank() == 0) {
    DTL_CUDA_CHECK(cudaSetDevice(g_gpu.device));
    stream.emplace();
    for (std::size_t s = 0; s < sets; ++s) {
      for (int r = 0; r < p; ++r) {
        bufs[s].emplace_back(bytes);
        ptrs[s].push_back(static_cast<float*>(bufs[s].back().data()));
        fill(ptrs[s].back(), count, r, stream->get());
      }
    }
    if (graph) {
      for (std::size_t s = 0; s < sets; ++s) {
        graphs.push_back(std::make_unique<lab::VirtualRingGraph<float>>(ptrs[s], count, stream->get(), true));
      }
    }
    // Correctness once, before timing: every buffer of set 0 holds the host sum.
    if (graph) {
      graphs[0]->run();
    } else {
      lab::virtual_ring_allreduce<float>(ptrs[0], count, stream->get(), true);
    }
    stream->synchronize();
    std::vector<float> got(count);
    for (int r = 0; r < p; ++r) {
      got = dtl::cuda::download(ptrs[0][static_cast<std::size_t>(r)], count, stream->get());
      for (std::size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int q = 0; q < p; ++q) sum += static_cast<float>(static_cast<int>((i * 7 + q * 13) % 33) - 16);
        wrong += got[i] != sum;
      }
    }
    // The roofline's copy: as many bytes as the ring's footprint, on the copy kernel.
    copy_src = DeviceBuffer(up * bytes);
    copy_dst = DeviceBuffer(up * bytes);
  }
  std::vector<double> t_ring, t_copy;
  std::size_t it = 0;
  for (auto _ : state) {
    const std::size_t s = it++ % sets;
    t_ring.push_back(shared_sample([&] {
      return time_on(stream->get(), [&] {
        if (graph) {
          graphs[s]->run();
        } else {
          lab::virtual_ring_allreduce<float>(ptrs[s], count, stream->get(), true);
        }
      });
    }));
    t_copy.push_back(shared_sample([&] {
      return time_on(stream->get(), [&] { lab::copy_device(copy_dst.data(), copy_src.data(), up * bytes, stream->get()); });
    }));
    state.SetIterationTime(t_ring.back());
  }
  DTL_MPI_CHECK(MPI_Bcast(&wrong, 1, MPI_DOUBLE, 0, comm()));
  const double ring = dtl::bench::median(t_ring), copy = dtl::bench::median(t_copy);
  const double copy_gbps = 2.0 * static_cast<double>(up * bytes) / copy * 1e-9;
  const double traffic = static_cast<double>(lab::virtual_ring_traffic_bytes(p, count, sizeof(float), true));
  const double roofline = traffic / (copy_gbps * 1e9);
  const double algbw = static_cast<double>(bytes) / ring * 1e-9;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["count"] = static_cast<double>(count);
  state.counters["type"] = sizeof(float);
  state.counters["time_us"] = ring * 1e6;
  state.counters["vendor_us"] = roofline * 1e6;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * 2.0 * (p - 1) / p;
  state.counters["wrong"] = wrong;
  state.counters["ratio"] = ring / roofline;
  state.counters["copy_GBps"] = copy_gbps;
  g_summary.push_back({std::string(graph ? "GpuVirtualRingGraph" : "GpuVirtualRing") + "/P" + std::to_string(p) + "/" +
                           dtl::format_bytes(bytes),
                       traffic / ring * 1e-9, copy_gbps, 0.0, roofline / ring,
                       graph ? ">= 80% of roofline" : ">= 70% of roofline"});
}

// ---------------------------------------------------------------------------
// GpuIpcRing/<size>, beside ncclAllReduce where NCCL can run
// ---------------------------------------------------------------------------

struct Placement {
  int device = 0;
  bool nccl_ok = false;
  std::string why_not_nccl;
};
Placement g_place;

// Task G2's row waits on other processes' flags: a wait never met would hang every
// rank (and the GPU session), so each call gets 20 s, then the job ends saying why.
void finish_within_or_abort(cudaStream_t stream) {
  if (dtl::cuda::synchronize_within(stream, 20.0)) return;
  std::fprintf(stderr, "rank %d: GpuIpcRingFlags: the ring's stream did not finish within 20 s: a step-flag wait "
               "was never met; aborting the job\n", comm().rank());
  MPI_Abort(MPI_COMM_WORLD, 3);
}

void ipc_ring_row(benchmark::State& state, std::size_t bytes, lab::IpcSync sync) {
  const std::size_t count = bytes / sizeof(float);
  const int p = comm().size();
  lab::IpcRing<float> ring(comm(), count, g_place.device);
  // Correctness once, before timing (the first GPU run timed a ring whose sums
  // were wrong): every rank's buffer holds the closed-form sum of fill()'s values.
  fill(ring.data(), count, comm().rank(), ring.stream());
  ring.allreduce(true, sync);
  finish_within_or_abort(ring.stream());
  double wrong = 0;
  {
    const std::vector<float> got = dtl::cuda::download(ring.data(), count, ring.stream());
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int q = 0; q < p; ++q) sum += static_cast<float>(static_cast<int>((i * 7 + q * 13) % 33) - 16);
      wrong += got[i] != sum;
    }
  }
  DTL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_SUM, comm()));
  fill(ring.data(), count, comm().rank(), ring.stream());
  dtl::bench::PairedTimer timer;
  const auto run_ring = [&] {
    ring.allreduce(true, sync);  // task G: ends with an agreement, all ranks done
    // Task G2 returns once queued; its stream is done once the neighbours' last
    // steps are (its exit waits), and the timer takes the slowest rank.
    if (sync == lab::IpcSync::kFlags) finish_within_or_abort(ring.stream());
  };
#if DTL_HAVE_NCCL
  std::optional<dtl::NcclComm> nccl;
  DeviceBuffer nccl_buf;
  if (g_place.nccl_ok) {
    nccl.emplace(comm(), g_place.device);
    nccl_buf = DeviceBuffer(bytes);
    fill(static_cast<float*>(nccl_buf.data()), count, comm().rank(), ring.stream());
  }
  const auto run_nccl = [&] {
    lab::nccl_allreduce<float>(*nccl, static_cast<const float*>(nccl_buf.data()), static_cast<float*>(nccl_buf.data()),
                               count, ring.stream());
    DTL_CUDA_CHECK(cudaStreamSynchronize(ring.stream()));  // the sample ends when the data is there
  };
#endif
  for (auto _ : state) {
#if DTL_HAVE_NCCL
    if (g_place.nccl_ok) {
      state.SetIterationTime(timer.time_pair(run_ring, run_nccl));
      continue;
    }
#endif
    state.SetIterationTime(timer.time_impl(run_ring));
  }
  const double t = timer.impl_median();
  const double algbw = static_cast<double>(bytes) / t * 1e-9;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["count"] = static_cast<double>(count);
  state.counters["type"] = sizeof(float);
  state.counters["time_us"] = t * 1e6;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * 2.0 * (p - 1) / p;
  state.counters["wrong"] = wrong;
  if (g_place.nccl_ok) {
    state.counters["vendor_us"] = timer.vendor_median() * 1e6;
    state.counters["ratio"] = timer.ratio_median();
  }
}

// ---------------------------------------------------------------------------
// Registration: only where rank 0 has a GPU
// ---------------------------------------------------------------------------

void say(const std::string& line) {
  if (comm().rank() == 0) std::printf("%s\n", line.c_str());
}

void register_rows() {
  std::string why;
  int ok = dtl::cuda::gpu_count(&why) > 0 ? 1 : 0;
  int ok_all = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, comm()));
  if (!ok_all) {
    say("# GPU tables: skipped — " + (ok ? std::string("another rank has no GPU") : why) +
        " (the reduce-copy, virtual-ring and NCCL rows need one)");
    return;
  }
  int gpus = dtl::cuda::gpu_count();
  g_gpu.device = 0;
  DTL_CUDA_CHECK(cudaSetDevice(g_gpu.device));
  int l2 = 0;
  DTL_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, g_gpu.device));
  g_gpu.l2_bytes = static_cast<std::size_t>(l2);
  cudaDeviceProp prop{};
  DTL_CUDA_CHECK(cudaGetDeviceProperties(&prop, g_gpu.device));
  g_gpu.name = prop.name;
  say("# GPU rows on " + g_gpu.name + " (L2 " + dtl::format_bytes(g_gpu.l2_bytes) + ", " + std::to_string(gpus) +
      " GPU(s)); single-GPU rows on rank 0; vendor = roofline time for GpuReduceCopy and GpuVirtualRing");

  const bool quick = dtl::bench::quick();
  const int iters = quick ? 5 : 20;
  std::vector<std::size_t> sizes;
  if (quick) {
    sizes = {kMiB, 64 * kMiB, 256 * kMiB};
  } else {
    for (std::size_t s = kMiB; s <= 1024 * kMiB; s *= 4) sizes.push_back(s);
  }
  for (std::size_t bytes : sizes) {
    benchmark::RegisterBenchmark(("GpuReduceCopy/" + dtl::format_bytes(bytes)).c_str(),
                                 [bytes](benchmark::State& st) { reduce_copy_row(st, bytes); })
        ->Iterations(iters)
        ->UseManualTime();
  }
  for (bool graph : {false, true}) {
    for (int p : {2, 4, 8}) {
      for (std::size_t bytes : sizes) {
        if (bytes > 256 * kMiB) continue;
        const std::string name = std::string(graph ? "GpuVirtualRingGraph" : "GpuVirtualRing") + "/P" +
                                 std::to_string(p) + "/" + dtl::format_bytes(bytes);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [p, bytes, graph](benchmark::State& st) { virtual_ring_row(st, p, bytes, graph); })
            ->Iterations(iters)
            ->UseManualTime();
      }
    }
  }

  if (comm().size() < 2) {
    say("# GpuIpcRing and NCCL rows: skipped — one rank; run with -n 2 or more (one GPU per rank for NCCL)");
    return;
  }
#if DTL_HAVE_NCCL
  const auto placement = dtl::gpu_placement(comm());
  g_place.device = placement.device;
  g_place.nccl_ok = placement.nccl_ok;
  g_place.why_not_nccl = placement.why_not;
#else
  g_place.device = comm().rank() % gpus;
  g_place.why_not_nccl = "this build has no NCCL";
#endif
  if (!g_place.nccl_ok) {
    say("# GpuIpcRing rows without NCCL beside them: " + g_place.why_not_nccl);
  }
  for (std::size_t bytes : sizes) {
    if (bytes > 256 * kMiB) continue;
    benchmark::RegisterBenchmark(("GpuIpcRing/" + dtl::format_bytes(bytes)).c_str(),
                                 [bytes](benchmark::State& st) { ipc_ring_row(st, bytes, lab::IpcSync::kHost); })
        ->Iterations(iters)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("GpuIpcRingFlags/" + dtl::format_bytes(bytes)).c_str(),
                                 [bytes](benchmark::State& st) { ipc_ring_row(st, bytes, lab::IpcSync::kFlags); })
        ->Iterations(iters)
        ->UseManualTime();
  }
}

void print_summary() {
  if (comm().rank() != 0 || g_summary.empty()) return;
  std::printf("\n# GPU bandwidth (GB/s of memory traffic: reads + writes), medians\n");
  std::printf("%-28s %12s %12s %12s %10s  %s\n", "# row", "impl GB/s", "copy GB/s", "memcpy GB/s", "of roof", "target");
  for (const auto& s : g_summary) {
    char memcpy_cell[32] = "-";
    if (s.memcpy_gbps > 0) std::snprintf(memcpy_cell, sizeof memcpy_cell, "%12.1f", s.memcpy_gbps);
    std::printf("%-28s %12.1f %12.1f %12s %9.1f%%  %s\n", s.row.c_str(), s.impl_gbps, s.copy_gbps, memcpy_cell,
                100.0 * s.share, s.target);
  }
}

[[maybe_unused]] const bool registered = [] {
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(print_summary);
  return true;
}();

}  // namespace

#endif  // DTL_LAB_HAS_CUDA
