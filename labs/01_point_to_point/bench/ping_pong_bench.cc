// Lab 01 benchmark, part 1: an OSU-style ping-pong sweep, 1 B to 4 MiB, between
// ranks 0 and 1 — ping_pong() beside a plain MPI_Send/MPI_Recv loop in the same
// run — then the alpha-beta fit of the measured times.
//
// time = one-way latency (half a round trip, median); vendor = the same round
// trips with MPI_Send/MPI_Recv only; GB/s = bytes / one-way time. After the
// table: alpha, beta, 1/beta and n_1/2 from fit_alpha_beta() over the medians,
// and the model's prediction for each size beside the measurement.
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

constexpr int kTag = 1;
std::vector<dtl::lab01::Sample> g_samples;  // (bytes, one-way median)

// The vendor baseline: the same round trips with nothing but MPI_Send/MPI_Recv.
void plain_round_trips(std::vector<std::byte>& buf, int round_trips) {
  const int rank = comm().rank();
  const int count = static_cast<int>(buf.size());
  for (int i = 0; i < round_trips; ++i) {
    if (rank == 0) {
      DTL_MPI_CHECK(MPI_Send(buf.data(), count, MPI_BYTE, 1, kTag, comm()));
      DTL_MPI_CHECK(MPI_Recv(buf.data(), count, MPI_BYTE, 1, kTag, comm(), MPI_STATUS_IGNORE));
    } else if (rank == 1) {
      DTL_MPI_CHECK(MPI_Recv(buf.data(), count, MPI_BYTE, 0, kTag, comm(), MPI_STATUS_IGNORE));
      DTL_MPI_CHECK(MPI_Send(buf.data(), count, MPI_BYTE, 0, kTag, comm()));
    }
  }
}

// One row: each iteration times `round_trips` round trips of each side, as a pair.
void ping_pong_row(benchmark::State& state, std::size_t bytes, int round_trips) {
  if (comm().size() < 2) {
    state.SkipWithError("ping-pong needs at least 2 ranks: ./dtl bench 01 -n 2");
    return;
  }
  std::vector<std::byte> send(bytes, std::byte{7}), recv(bytes), plain(bytes, std::byte{7});
  // Warm-up, untimed: first touches of the buffers and the connection set-up.
  // Every rank makes the same call, so an error (a skeleton's NotImplemented)
  // is thrown on every rank and the row is skipped everywhere.
  try {
    dtl::lab01::ping_pong(comm(), send, recv, 0, 1, round_trips, kTag);
  } catch (const dtl::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  plain_round_trips(plain, round_trips);
  dtl::bench::PairedTimer timer;
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair(
        [&] { dtl::lab01::ping_pong(comm(), send, recv, 0, 1, round_trips, kTag); },
        [&] { plain_round_trips(plain, round_trips); }));
  }
  const double one_way = timer.impl_median() / (2.0 * round_trips);
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["time_us"] = one_way * 1e6;
  state.counters["vendor_us"] = timer.vendor_median() / (2.0 * round_trips) * 1e6;
  state.counters["ratio"] = timer.ratio_median();
  state.counters["GBps"] = one_way > 0 ? static_cast<double>(bytes) / one_way / 1e9 : 0.0;
  g_samples.push_back({bytes, one_way});
}

void register_rows() {
  if (comm().rank() == 0) {
    std::printf("# PingPong: time = one-way latency (half a round trip) of ping_pong(); "
                "vendor = MPI_Send/MPI_Recv\n");
  }
  const bool quick = dtl::bench::quick();
  for (std::size_t bytes = 1; bytes <= (4u << 20); bytes *= quick ? 16 : 2) {
    // About the same time per row: many round trips for small messages, few for large.
    const int round_trips = bytes <= 4096 ? 50 : bytes <= (256u << 10) ? 10 : 2;
    const int iterations = quick ? 15 : (bytes <= (256u << 10) ? 100 : 40);
    const std::string name = "PingPong/" + dtl::format_bytes(bytes);
    benchmark::RegisterBenchmark(name.c_str(), ping_pong_row, bytes, round_trips)
        ->Iterations(iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

// After the table: fit alpha and beta to the medians and show the model.
void print_fit() {
  if (comm().rank() != 0 || g_samples.size() < 2) return;
  auto show = [](const char* label, const dtl::lab01::AlphaBeta& f) {
    std::printf("#   %-22s alpha = %7.3f us   beta = %.4f ns/B   1/beta = %5.2f GB/s   n_1/2 = %.0f B\n",
                label, f.alpha * 1e6, f.beta * 1e9, 1.0 / f.beta / 1e9, f.alpha / f.beta);
  };
  dtl::lab01::AlphaBeta fit{};
  try {
    fit = dtl::lab01::fit_alpha_beta(g_samples);
  } catch (const dtl::Error& e) {
    std::printf("\n# no alpha-beta fit: %s\n", e.what());
    return;
  }
  std::printf("\n# alpha-beta fits (weighted by 1/t^2) of the PingPong medians:\n");
  show("all sizes:", fit);
  // Above the eager limit MPI switches to the rendezvous protocol (a handshake
  // before the data), so the large messages have their own, larger alpha.
  std::vector<dtl::lab01::Sample> large;
  for (const auto& s : g_samples) {
    if (s.bytes >= 8192) large.push_back(s);
  }
  if (large.size() >= 2) show(">= 8 KiB (rendezvous):", dtl::lab01::fit_alpha_beta(large));
  std::printf("# %10s %14s %14s %8s\n", "size (B)", "measured (us)", "model (us)", "model/meas");
  for (const auto& s : g_samples) {
    std::printf("# %10zu %14.2f %14.2f %8.2f\n", s.bytes, s.seconds * 1e6, fit.predict(s.bytes) * 1e6,
                fit.predict(s.bytes) / s.seconds);
  }
}

const bool registered = [] {
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(print_fit);
  return true;
}();

}  // namespace
