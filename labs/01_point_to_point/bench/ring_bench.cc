// Lab 01 benchmark, part 2: ring_shift() beside one MPI_Sendrecv per rank (the
// vendor's deadlock-free shift), 1 KiB to 4 MiB, all ranks at once. The grader's
// performance item times the student's build of this row against the
// reference's (grader/rubrics/01.toml).
//
// Rows: 1 KiB to 4 MiB by 4x (quick: 1 KiB, 64 KiB, 4 MiB — the grader's runs).
// time = one shift (every rank sends and receives `bytes`), median;
// GB/s = bytes / time, per rank.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::bench::comm;

constexpr int kTag = 2;

void ring_row(benchmark::State& state, std::size_t bytes) {
  const int rank = comm().rank();
  const int size = comm().size();
  const int count = static_cast<int>(bytes);
  std::vector<std::byte> send(bytes, std::byte{3}), recv(bytes), vendor_recv(bytes);
  auto vendor = [&] {
    DTL_MPI_CHECK(MPI_Sendrecv(send.data(), count, MPI_BYTE, (rank + 1) % size, kTag, vendor_recv.data(), count,
                               MPI_BYTE, (rank - 1 + size) % size, kTag, comm(), MPI_STATUS_IGNORE));
  };
  auto impl = [&] { dtl::lab01::ring_shift(comm(), send, recv, kTag); };
  try {
    impl();  // warm-up, untimed; an error (NotImplemented) skips the row on every rank
  } catch (const dtl::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  vendor();
  dtl::bench::PairedTimer timer;
  for (auto _ : state) state.SetIterationTime(timer.time_pair(impl, vendor));
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["time_us"] = timer.impl_median() * 1e6;
  state.counters["vendor_us"] = timer.vendor_median() * 1e6;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["GBps"] = timer.impl_median() > 0 ? static_cast<double>(bytes) / timer.impl_median() / 1e9 : 0;
}

void register_rows() {
  if (comm().rank() == 0) {
    std::printf("# RingShift: time = one ring_shift() on every rank; vendor = one MPI_Sendrecv\n");
  }
  const bool quick = dtl::bench::quick();
  for (std::size_t bytes = 1024; bytes <= (4u << 20); bytes *= quick ? 64 : 4) {
    const std::string name = "RingShift/" + dtl::format_bytes(bytes);
    benchmark::RegisterBenchmark(name.c_str(), ring_row, bytes)
        ->Iterations(quick ? 15 : 60)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

const bool registered = [] {
  dtl::bench::at_start(register_rows);
  return true;
}();

}  // namespace
