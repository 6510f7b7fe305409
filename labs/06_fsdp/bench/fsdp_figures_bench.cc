// Lab 06 benchmark, beside the rows (fsdp_bench.cc holds the timed rows; the two
// files are one program, ./dtl bench 06; fsdp_bench.h is what they share): peak
// memory per rank against Note [ZeRO stages], the communication prefetch hides,
// the memory of one FSDP step over time, and a Chrome trace of one FSDP step.
//
// Printed first, before the first Step row:
//   the memory table   per mode: peak parameter, gradient and optimizer bytes of this
//                      rank (MemoryTracker, one step after a warm-up), their sum, and
//                      Note [ZeRO stages]'s closed form for the same W; DDP is a plain
//                      data-parallel step written here (flat buffers, one allreduce of
//                      the averaged gradients, AdamW over everything): 4N + 4N + 8N.
//                      The offload row is the compute device's (Device::kCpu) bytes;
//                      a line under the table gives its host side (Device::kPinnedHost)
//                      and the bytes copied per step (Note [CPU offload]).
// At the end: the part of the all-gather time prefetch hid on the emulated link,
// 1 - exposed(prefetch 1) / exposed(prefetch 0); from one traced step per prefetch,
// the share of the link's model time that overlapped the issuing rank's compute
// (what the schedule hides, however late the peers arrive); the traces (lab06_trace_fsdp.json:
// one FSDP step with prefetch 1 on emulated 1GbE, every rank a process; _p0.json the same
// without prefetch) and the
// memory-over-time samples (lab06_memory_fsdp_p0.csv and _p1.csv: one FSDP step,
// rank 0, the MemoryTracker read at every hook) in $DTL_TRACE_OUT (default: the
// current folder; ./dtl bench sets build/bench-out).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fsdp_bench.h"
#include "harness/bench/bench.h"
#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/memory.h"
#include "harness/nn/model.h"
#include "lab06/fsdp.h"

namespace dtl::lab06::fsdp_bench {

namespace {

namespace lab06 = dtl::lab06;
using dtl::bench::comm;
using C = nn::MemoryCategory;

// ---------------------------------------------------------------------------
// Memory: measured against Note [ZeRO stages]
// ---------------------------------------------------------------------------

struct Peaks {
  std::int64_t params = 0, grads = 0, optim = 0;
};

// The peaks of one device's tracker since `before` (a snapshot taken before the model was made).
Peaks peaks_since(nn::Device device, const nn::MemorySnapshot& before) {
  const nn::MemoryTracker& t = nn::memory_tracker(device);
  return {t.peak(C::kParameters) - before.current[static_cast<int>(C::kParameters)],
          t.peak(C::kGradients) - before.current[static_cast<int>(C::kGradients)],
          t.peak(C::kOptimizerState) - before.current[static_cast<int>(C::kOptimizerState)]};
}

struct Measured {
  Peaks device, host;  // host: Device::kPinnedHost (offload only)
  std::int64_t to_device = 0, to_host = 0;  // offload: bytes copied in the second step
};

Measured measure(const Mode& m) {
  auto& device = nn::memory_tracker(nn::Device::kCpu);
  auto& host = nn::memory_tracker(nn::Device::kPinnedHost);
  const nn::MemorySnapshot device0 = device.snapshot(), host0 = host.snapshot();
  Measured out;
  auto run = [&](auto& t) {
    t.step();
    device.reset_peak();
    host.reset_peak();
    t.step();
    out.device = peaks_since(nn::Device::kCpu, device0);
    out.host = peaks_since(nn::Device::kPinnedHost, host0);
  };
  if (m.ddp) {
    Ddp t(backend("mpi-thread"));
    run(t);
  } else {
    Sharded t(backend("mpi-thread"), m);
    run(t);
    out.to_device = t.last.host_to_device_bytes;
    out.to_host = t.last.device_to_host_bytes;
  }
  return out;
}

// Note [ZeRO stages], from the model's own units (padded to W) and prefetch k.
Peaks closed_form(const Mode& m) {
  nn::Model model = make_model();
  const int w = comm().size();
  std::int64_t n = 0, largest = 0, unpadded = model.parameter_count();
  for (int u = 0; u < model.unit_count(); ++u) {
    std::int64_t c = 0;
    for (const nn::Parameter* p : model.unit(u).parameters()) c += p->value.numel();
    c = (c + w - 1) / w * w;
    n += c;
    largest = std::max(largest, c);
  }
  const std::int64_t s = n / w, held = 4 * (1 + m.prefetch) * largest;
  if (m.ddp) return {4 * unpadded, 4 * unpadded, 8 * unpadded};
  if (m.offload) return {held, held, 0};  // the device side; the host holds 4S, 4S, 8S
  switch (m.mode) {
    case lab06::ShardingMode::kZero1: return {4 * n, 4 * n, 8 * s};
    case lab06::ShardingMode::kZero2: return {4 * n, 4 * s + held, 8 * s};
    case lab06::ShardingMode::kFsdp: return {4 * s + held, 4 * s + held, 8 * s};
  }
  return {};
}
}  // namespace

void print_memory() {
  nn::Model model = make_model();
  if (comm().rank() == 0) {
    std::printf("# model: MLP in %lld, hidden %lld x %d, %lld classes; %lld parameters in %d units (largest %lld); "
                "batch %lld per rank; AdamW; %d ranks\n",
                static_cast<long long>(kIn), static_cast<long long>(kHidden), kDepth,
                static_cast<long long>(kClasses), static_cast<long long>(model.parameter_count()), model.unit_count(),
                static_cast<long long>(kHidden * kHidden + kHidden), static_cast<long long>(kBatch), comm().size());
    std::printf("# memory per rank (MiB; MemoryTracker peaks during a step; closed form of Note [ZeRO stages])\n");
    std::printf("# %-16s %10s %10s %10s %10s %12s %8s\n", "mode", "params", "grads", "optimizer", "total",
                "closed form", "off by");
  }
  std::vector<Measured> offload_lines;
  for (const Mode& m : modes()) {
    const Measured measured = measure(m);
    const Peaks p = measured.device, want = closed_form(m);
    const double mib = 1.0 / (1 << 20);
    const double total = static_cast<double>(p.params + p.grads + p.optim) * mib;
    const double formula = static_cast<double>(want.params + want.grads + want.optim) * mib;
    if (comm().rank() == 0) {
      std::printf("# %-16s %10.2f %10.2f %10.2f %10.2f %12.2f %7.1f%%\n", m.name.c_str(),
                  static_cast<double>(p.params) * mib, static_cast<double>(p.grads) * mib,
                  static_cast<double>(p.optim) * mib, total, formula, 100.0 * (total - formula) / formula);
      if (m.offload) offload_lines.push_back(measured);
    }
  }
  for (const Measured& h : offload_lines) {
    const double mib = 1.0 / (1 << 20);
    const std::int64_t s = closed_form({"fsdp", false, lab06::ShardingMode::kFsdp, 0}).optim / 8;
    std::printf("# fsdp+offload, host side (pinned): params %.2f, grads %.2f, optimizer %.2f MiB (closed form 4S, 4S, "
                "8S = %.2f, %.2f, %.2f); copied per step: %.2f MiB to the device (8S), %.2f MiB back (4S)\n",
                static_cast<double>(h.host.params) * mib, static_cast<double>(h.host.grads) * mib,
                static_cast<double>(h.host.optim) * mib, static_cast<double>(4 * s) * mib,
                static_cast<double>(4 * s) * mib, static_cast<double>(8 * s) * mib,
                static_cast<double>(h.to_device) * mib, static_cast<double>(h.to_host) * mib);
  }
  if (comm().rank() == 0) {
    std::printf("# (the prefetch row's closed form is the bound 4S + 4(1 + k)L per category)\n");
  }
}

namespace {

// ---------------------------------------------------------------------------
// At the end: hidden communication, the trace, memory over time
// ---------------------------------------------------------------------------

std::string out_folder() {
  const char* dir = std::getenv("DTL_TRACE_OUT");
  return dir != nullptr && *dir != '\0' ? dir : ".";
}

// The share of the emulated link's model time, summed over all ranks, during which
// the rank that issued the operation was computing (inside a "compute" span). Each
// operation had the link from its Work's start_seconds() for model_seconds() (the
// emulator's FIFO makes one rank's intervals disjoint); a late peer does not change
// this share, only how long the rank waits after it (the wall-clock "exposed").
double link_time_hidden(const dtl::Timeline& timeline, const lab06::ShardedTrainer& trainer) {
  const dtl::LinkModel link = dtl::link_by_name("1GbE");
  std::vector<std::pair<double, double>> compute;
  for (const dtl::Span& s : timeline.spans()) {
    if (s.track == "compute") compute.emplace_back(s.begin_seconds, s.end_seconds);
  }
  double local[2] = {0.0, 0.0};  // overlapped, total
  for (const dtl::Span& s : timeline.spans()) {
    if (s.track != "comm") continue;
    const bool gather = s.name.rfind("allgather ", 0) == 0;
    const std::string unit = s.name.substr(s.name.find(' ') + 1);
    for (int u = 0; u < trainer.unit_count(); ++u) {
      if (trainer.unit(u).name != unit) continue;
      const auto bytes = static_cast<std::size_t>(trainer.unit(u).layout.padded * 4);
      const double model = dtl::model_seconds(
          link, gather ? dtl::CollectiveKind::kAllgather : dtl::CollectiveKind::kReduceScatter, bytes, comm().size());
      const double a = s.begin_seconds, b = s.begin_seconds + model;
      local[1] += model;
      for (const auto& [x, y] : compute) local[0] += std::max(0.0, std::min(b, y) - std::max(a, x));
    }
  }
  double all[2] = {0.0, 0.0};
  DTL_MPI_CHECK(MPI_Allreduce(local, all, 2, MPI_DOUBLE, MPI_SUM, comm()));
  return all[1] > 0.0 ? all[0] / all[1] : 0.0;
}

}  // namespace

void report_after_rows() {
  const auto& e = exposed_by_row();
  const auto p0 = e.find("1GbE/fsdp"), p1 = e.find("1GbE/fsdp+prefetch1");
  if (comm().rank() == 0 && p0 != e.end() && p1 != e.end() && p0->second > 0) {
    std::printf("# FSDP on EMULATED 1GbE: waiting for communication %.2f ms without prefetch, %.2f ms with prefetch 1: "
                "prefetch hid %.0f%% of it\n",
                p0->second * 1e3, p1->second * 1e3, 100.0 * (1.0 - p1->second / p0->second));
  }
  if (auto* link = dynamic_cast<dtl::EmulatedCommunicator*>(&backend("1GbE"))) {
    const auto late = static_cast<long long>(link->late_operations());
    long long all = 0;
    DTL_MPI_CHECK(MPI_Allreduce(&late, &all, 1, MPI_LONG_LONG, MPI_SUM, comm()));
    if (comm().rank() == 0) {
      std::printf("# EMULATED 1GbE: %lld operations (all ranks) ended after their model time because the real "
                  "collective underneath was slower (CPU shared with compute): there the emulation is not faithful\n",
                  all);
    }
  }
  const std::string folder = out_folder();
  // One traced FSDP step per prefetch on emulated 1GbE: the share of the link's time
  // the schedule hid (link_time_hidden), and the trace of the prefetch-1 step.
  double hidden[2] = {0.0, 0.0};
  for (int k : {0, 1}) {
    dtl::Timeline timeline(comm().rank(), "rank " + std::to_string(comm().rank()));
    Sharded t(backend("1GbE"), {"fsdp", false, lab06::ShardingMode::kFsdp, k}, &timeline, {}, kLinkBatch);
    t.step();
    timeline.clear();
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    t.step();
    hidden[k] = link_time_hidden(timeline, *t.trainer);
    const std::string path = folder + (k == 1 ? "/lab06_trace_fsdp.json" : "/lab06_trace_fsdp_p0.json");
    timeline.write_gathered(comm(), path);
    if (comm().rank() == 0) {
      std::printf("# trace of one FSDP step (prefetch %d) on EMULATED 1GbE: %s (open in https://ui.perfetto.dev)\n", k,
                  path.c_str());
    }
  }
  if (comm().rank() == 0) {
    std::printf("# FSDP on EMULATED 1GbE, one traced step, all ranks: the link's model time that overlapped the same "
                "rank's compute: %.0f%% with prefetch 0, %.0f%% with prefetch 1 (what the schedule hides, whenever "
                "the peers arrive; RESULTS.md, \"Prefetch at 4 ranks\")\n",
                100.0 * hidden[0], 100.0 * hidden[1]);
  }
  // Memory over time: the tracker at every hook of one step, prefetch 0 and 1.
  for (int k : {0, 1}) {
    struct Sample {
      double t;
      std::string phase;
      int unit;
      std::int64_t params, grads, optim, comm_bytes;
    };
    std::vector<Sample> samples;
    auto& tracker = nn::memory_tracker();
    double origin = 0.0;
    auto observe = [&](const char* phase, int unit) {
      samples.push_back({dtl::clock_seconds() - origin, phase, unit, tracker.current(C::kParameters),
                         tracker.current(C::kGradients), tracker.current(C::kOptimizerState),
                         tracker.current(C::kCommunication)});
    };
    Sharded t(backend("1GbE"), {"fsdp", false, lab06::ShardingMode::kFsdp, k}, nullptr, observe, kLinkBatch);
    t.step();
    samples.clear();
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    origin = dtl::clock_seconds();
    observe("start", -1);
    t.step();
    if (comm().rank() == 0) {
      const std::string path = folder + "/lab06_memory_fsdp_p" + std::to_string(k) + ".csv";
      if (std::FILE* f = std::fopen(path.c_str(), "w")) {
        std::fprintf(f, "t_ms,phase,unit,params,grads,optimizer,communication\n");
        for (const Sample& s : samples) {
          std::fprintf(f, "%.3f,%s,%d,%lld,%lld,%lld,%lld\n", s.t * 1e3, s.phase.c_str(), s.unit,
                       static_cast<long long>(s.params), static_cast<long long>(s.grads),
                       static_cast<long long>(s.optim), static_cast<long long>(s.comm_bytes));
        }
        std::fclose(f);
        std::printf("# memory over one FSDP step (prefetch %d), rank 0: %s\n", k, path.c_str());
      }
    }
  }
}

}  // namespace dtl::lab06::fsdp_bench
