// Tests of the alpha-beta network emulator (harness/comm/emulated_communicator.h):
// the link model against its closed form, an emulated collective completing no
// earlier than the model says and not much later, one link's FIFO order, and
// overlap with the caller's work, measured (figures printed by rank 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"
#include "harness/comm/tests/backends_under_test.h"

namespace {

using ::testing::HasSubstr;
using dtl::CollectiveKind;
using dtl::Communicator;
using dtl::Work;
using dtl::testing::Backend;
using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::make_backend;
using dtl::testing::values;

// ---------------------------------------------------------------------------
// The alpha-beta emulator
// ---------------------------------------------------------------------------

TEST(LinkModel, FormulasMatchTheClosedForm) {
  const dtl::LinkModel link{"test", 1e-3, 1e9};  // 1 ms, 1 GB/s
  const std::size_t n = 8'000'000;                // 8 MB
  // P = 4: a ring step moves n/P = 2 MB in 2 ms, plus alpha.
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 4), 6 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kReduceScatter, n, 4), 3 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllgather, n, 4), 3 * (1e-3 + 2e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kBroadcast, n, 4), 2 * (1e-3 + 8e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kBroadcast, n, 3), 2 * (1e-3 + 8e-3));
  EXPECT_DOUBLE_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 2), 2 * (1e-3 + 4e-3));
  EXPECT_EQ(dtl::model_seconds(link, CollectiveKind::kAllreduce, n, 1), 0.0);
}

TEST(LinkModel, PresetsAndParsing) {
  const auto ten = dtl::link_by_name("10gbe");
  EXPECT_EQ(ten.name, "10GbE");
  EXPECT_DOUBLE_EQ(ten.bytes_per_second, 1.25e9);
  for (const auto& name : dtl::link_names()) EXPECT_EQ(dtl::link_by_name(name).name, name);
  EXPECT_DOUBLE_EQ(dtl::link_by_name("NVLink4").bytes_per_second, 450e9);

  const auto custom = dtl::parse_link("alpha=5us,bw=10GB/s");
  EXPECT_DOUBLE_EQ(custom.alpha_seconds, 5e-6);
  EXPECT_DOUBLE_EQ(custom.bytes_per_second, 1e10);
  EXPECT_DOUBLE_EQ(dtl::parse_link("alpha=2ms, bw=8Gb/s").bytes_per_second, 1e9);  // bits
  EXPECT_DOUBLE_EQ(dtl::parse_link("bw=100Gbps").bytes_per_second, 12.5e9);
  EXPECT_DOUBLE_EQ(dtl::parse_link("bw=1GiB/s").bytes_per_second, 1073741824.0);
  EXPECT_DOUBLE_EQ(dtl::parse_link("alpha=2ms,bw=1MB/s").alpha_seconds, 2e-3);
  EXPECT_EQ(dtl::parse_link("100GbE").name, "100GbE");

  try {
    dtl::link_by_name("carrier-pigeon");
    ADD_FAILURE() << "an unknown link should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'carrier-pigeon', not a known link; known: 1GbE, 10GbE, 25GbE"));
  }
  EXPECT_THROW(dtl::parse_link("alpha=5 parsecs,bw=1GB/s"), dtl::InvalidArgument);
  EXPECT_THROW(dtl::parse_link("alpha=5us"), dtl::InvalidArgument);
  EXPECT_THROW(dtl::parse_link("beta=5us,bw=1GB/s"), dtl::InvalidArgument);
}

TEST(LinkModel, TwoLevelGivesEachRingTheLinkOfItsSlowestHop) {
  const dtl::TwoLevelLink net{dtl::link_by_name("NVLink4"), dtl::link_by_name("10GbE"), 2};
  const std::vector<int> inside{2, 3}, across{1, 2}, world{0, 1, 2, 3}, replicas{1, 3}, one{5};
  EXPECT_EQ(net.link_for(inside).name, "NVLink4");
  EXPECT_EQ(net.link_for(across).name, "10GbE");
  EXPECT_EQ(net.link_for(world).name, "10GbE");
  EXPECT_EQ(net.link_for(replicas).name, "10GbE");
  EXPECT_EQ(net.link_for(one).name, "NVLink4");
  const dtl::TwoLevelLink everyone{net.inside, net.across, 4};  // G = P: one group, nothing crosses
  EXPECT_EQ(everyone.link_for(world).name, "NVLink4");
  EXPECT_THAT(net.describe(), HasSubstr("groups of 2 on NVLink4"));

  const dtl::TwoLevelLink bad{net.inside, net.across, 0};
  try {
    bad.link_for(world);
    ADD_FAILURE() << "group_size 0 should throw";
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("group_size"));
  }
  EXPECT_THROW(net.link_for(std::vector<int>{}), dtl::InvalidArgument);
  EXPECT_THROW(net.link_for(std::vector<int>{-1}), dtl::InvalidArgument);
}

// Comm::split and the two-level constructor: consecutive pairs of ranks on the
// inside link, and the communicator of everyone on the across link (when P > 2).
TEST(Emulator, TwoLevelPicksTheLinkOfItsMembers) {
  const int rank = comm().rank(), size = comm().size();
  const dtl::TwoLevelLink net{dtl::parse_link("alpha=1us,bw=100GB/s"), dtl::parse_link("alpha=1ms,bw=1GB/s"), 2};
  dtl::Comm pair = dtl::Comm::split(comm(), rank / 2, rank);
  EXPECT_EQ(pair.rank(), rank % 2);
  std::vector<int> pair_ranks;
  for (int r = rank / 2 * 2; r < std::min(size, rank / 2 * 2 + 2); ++r) pair_ranks.push_back(r);
  EXPECT_EQ(pair.size(), static_cast<int>(pair_ranks.size()));
  dtl::EmulatedCommunicator inside(std::make_unique<dtl::MpiCommunicator>(pair, dtl::MpiMode::kThread), net,
                                   pair_ranks);
  EXPECT_DOUBLE_EQ(inside.link().bytes_per_second, 100e9);
  std::vector<int> all(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) all[static_cast<std::size_t>(r)] = r;
  dtl::EmulatedCommunicator world(std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), net, all);
  EXPECT_DOUBLE_EQ(world.link().bytes_per_second, size > 2 ? 1e9 : 100e9);
  std::vector<float> x{static_cast<float>(rank)};
  world.allreduce_blocking(std::span<float>(x));
  EXPECT_EQ(x[0], static_cast<float>(size * (size - 1) / 2));
  EXPECT_THROW(dtl::EmulatedCommunicator(std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), net,
                                         std::vector<int>(static_cast<std::size_t>(size) + 1, 0)),
               dtl::InvalidArgument);
}

// A slow link, so that model times (milliseconds) dwarf the clock's resolution.
std::unique_ptr<dtl::EmulatedCommunicator> slow_emulator() {
  return std::make_unique<dtl::EmulatedCommunicator>(
      std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), dtl::parse_link("alpha=1ms,bw=200MB/s"));
}

// The upper bound is loose on purpose: a 2-core machine running 4 ranks is noisy.
constexpr double kLateSlack = 1.0;  // seconds

TEST(Emulator, CompletesNoEarlierThanTheModelAndNotMuchLater) {
  auto c = slow_emulator();
  EXPECT_THAT(c->name(), HasSubstr("emulated alpha=1ms,bw=200MB/s"));
  const int rank = comm().rank();
  std::ostringstream report;
  report << "[dtl] emulator accuracy on " << c->link().describe() << ", P = " << comm().size()
         << " (this rank's Work, end - start):\n";
  for (std::size_t n : {std::size_t{0}, std::size_t{1000}, std::size_t{1u << 18}}) {
    std::vector<float> buf = values<float>(n, rank), expected(n);
    MPI_Allreduce(buf.data(), expected.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm());
    const double model = dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, n * 4, comm().size());
    Work w = c->allreduce(std::span<float>(buf));
    EXPECT_THAT(w.description(), HasSubstr("on emulated"));
    w.wait();
    const double now = dtl::clock_seconds();
    EXPECT_TRUE(buffers_equal(expected, buf, "emulated allreduce n=" + std::to_string(n)));
    EXPECT_GE(w.end_seconds() - w.start_seconds(), model - 1e-9) << "n=" << n;
    EXPECT_GE(now - w.issue_seconds(), model - 1e-9) << "wait() returned before the model's time, n=" << n;
    EXPECT_LE(w.end_seconds() - w.start_seconds(), model + kLateSlack) << "n=" << n;
    char line[160];
    std::snprintf(line, sizeof line, "  allreduce %9s  model %8.3f ms  emulated %8.3f ms  (+%.3f ms)\n",
                  dtl::format_bytes(n * 4).c_str(), model * 1e3, (w.end_seconds() - w.start_seconds()) * 1e3,
                  (w.end_seconds() - w.start_seconds() - model) * 1e3);
    report << line;
  }
  if (rank == 0) std::cout << report.str() << std::flush;
}

TEST(Emulator, SerializesOperationsFifoAsOnOneLink) {
  auto c = slow_emulator();
  const int rank = comm().rank();
  const std::size_t sizes[] = {1u << 16, 1000, 1u << 17};
  std::vector<std::vector<float>> bufs;
  for (std::size_t n : sizes) bufs.push_back(values<float>(n, rank));
  const double first_issue = dtl::clock_seconds();
  std::vector<Work> works;
  for (auto& b : bufs) works.push_back(c->allreduce(std::span<float>(b)));
  // Reduce-scatter and allgather take the link after the allreduces.
  const std::size_t block = 5000;
  const auto send = values<float>(block * static_cast<std::size_t>(comm().size()), rank);
  std::vector<float> shard(block), gathered(send.size());
  works.push_back(c->reduce_scatter(std::span<const float>(send), std::span<float>(shard)));
  works.push_back(c->allgather(std::span<const float>(shard), std::span<float>(gathered)));
  for (auto& w : works) w.wait();
  const double elapsed = dtl::clock_seconds() - first_issue;

  const int p = comm().size();
  std::vector<double> model;
  for (std::size_t n : sizes) model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, n * 4, p));
  model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kReduceScatter, send.size() * 4, p));
  model.push_back(dtl::model_seconds(c->link(), CollectiveKind::kAllgather, gathered.size() * 4, p));
  double total = 0;
  for (std::size_t i = 0; i < works.size(); ++i) {
    total += model[i];
    EXPECT_GE(works[i].end_seconds() - works[i].start_seconds(), model[i] - 1e-9) << "op " << i;
    if (i > 0) {
      // The link is busy until the previous operation's model time is over.
      EXPECT_GE(works[i].start_seconds(), works[i - 1].start_seconds() + model[i - 1] - 1e-9) << "op " << i;
    }
  }
  EXPECT_GE(elapsed, total - 1e-9) << "FIFO: the operations cannot share the link";
  EXPECT_LE(elapsed, total + kLateSlack);
}

// The point of the emulator: the model's time passes while the caller works, on
// no core. "Compute" is a sleep here so that the check holds on a loaded machine.
TEST(Emulator, OverlapsWithTheCallersWork) {
  // A link so slow (alpha 100 ms) that the model dwarfs the real 64 KiB allreduce
  // even on a loaded machine: run one after the other, the two would take 2x the model.
  auto c = std::make_unique<dtl::EmulatedCommunicator>(
      std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread), dtl::parse_link("alpha=100ms,bw=10MB/s"));
  std::vector<float> buf = values<float>(1u << 14, comm().rank());
  const double model = dtl::model_seconds(c->link(), CollectiveKind::kAllreduce, buf.size() * 4, comm().size());
  const double compute = std::max(model, 0.01);
  const double begin = dtl::clock_seconds();
  Work w = c->allreduce(std::span<float>(buf));
  std::this_thread::sleep_for(std::chrono::duration<double>(compute));
  w.wait();
  const double both = dtl::clock_seconds() - begin;
  EXPECT_GE(both, std::max(model, compute) - 1e-9);
  EXPECT_LT(both, compute + model * 0.5 + 0.01) << "the emulated allreduce did not overlap the caller's work";
}


// ---------------------------------------------------------------------------
// Overlap, measured (figures printed by rank 0; see harness/README.md)
// ---------------------------------------------------------------------------

// Arithmetic on a private array: memory-bound like a backward pass, no MPI.
double compute(std::vector<float>& scratch, int repeats) {
  double sum = 0;
  for (int r = 0; r < repeats; ++r) {
    for (auto& x : scratch) x = x * 0.999f + 0.001f;
    sum += scratch[r % scratch.size()];
  }
  return sum;
}

double slowest(double seconds) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, comm());
  return max;
}

// Times fn on every rank after a barrier: the median of `reps` of the slowest rank's time.
template <typename F>
double timed(int reps, F&& fn) {
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(comm());
    const double begin = dtl::clock_seconds();
    fn();
    samples.push_back(slowest(dtl::clock_seconds() - begin));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

TEST(Overlap, MeasuresComputeWhileAllreduceInFlight) {
  // 4 MiB of f32 and 3 repetitions by default (quick, in ctest);
  // DTL_OVERLAP_MIB and DTL_OVERLAP_REPS for a longer measurement.
  const char* mib = std::getenv("DTL_OVERLAP_MIB");
  const char* reps_env = std::getenv("DTL_OVERLAP_REPS");
  const std::size_t count = (mib != nullptr ? std::strtoul(mib, nullptr, 10) : 4) * (std::size_t{1} << 18);
  const int reps = reps_env != nullptr ? std::atoi(reps_env) : 3;
  std::vector<float> grads = values<float>(count, comm().rank());
  std::vector<float> scratch(std::size_t{1} << 20, 1.0f);  // 4 MiB: one compute repeat
  volatile double sink = 0;
  // One compute repeat's time, to size the compute to each backend's allreduce.
  const double one = timed(3, [&] { sink = sink + compute(scratch, 20); }) / 20;

  std::ostringstream table;
  table << "[dtl] overlap of a " << dtl::format_bytes(count * 4) << " f32 allreduce with compute, P = "
        << comm().size() << " (medians of " << reps << " repetitions, slowest rank):\n"
        << "  backend                                                         comm ms  compute ms  both ms  overlap\n";
  const auto emulated_over = [&](const char* link, dtl::MpiMode mode) -> std::unique_ptr<Communicator> {
    return std::make_unique<dtl::EmulatedCommunicator>(std::make_unique<dtl::MpiCommunicator>(comm(), mode),
                                                       dtl::link_by_name(link));
  };
  std::vector<std::function<std::unique_ptr<Communicator>()>> backends = {
      [] { return make_backend(Backend::kNonblocking); },
      [] { return make_backend(Backend::kThread); },
      [] { return make_backend(Backend::kPolling); },
      [&] { return emulated_over("10GbE", dtl::MpiMode::kThread); },
      [&] { return emulated_over("10GbE", dtl::MpiMode::kNonblocking); },
      [&] { return emulated_over("1GbE", dtl::MpiMode::kThread); },
      [&] { return emulated_over("1GbE", dtl::MpiMode::kNonblocking); }};
  for (const auto& make_backend : backends) {
    std::unique_ptr<Communicator> c = make_backend();
    grads = values<float>(count, comm().rank());  // each allreduce multiplies it by P: start afresh
    // Calibrate: as much compute as this backend's allreduce takes alone (warm),
    // where overlap matters most, and where the metric below is the most telling.
    const double warm = timed(3, [&] { c->allreduce(std::span<float>(grads)).wait(); });
    int repeats = static_cast<int>(std::clamp(warm / std::max(one, 1e-6), 1.0, 2000.0));
    MPI_Bcast(&repeats, 1, MPI_INT, 0, comm());
    // Each repetition times all three back to back, so that load from elsewhere
    // hits the three alike; the overlap is computed per repetition, then the median taken.
    std::vector<double> comms, computes, boths, overlaps;
    for (int rep = 0; rep < reps; ++rep) {
      comms.push_back(timed(1, [&] { c->allreduce(std::span<float>(grads)).wait(); }));
      computes.push_back(timed(1, [&] { sink = sink + compute(scratch, repeats); }));
      boths.push_back(timed(1, [&] {
        Work w = c->allreduce(std::span<float>(grads));
        sink = sink + compute(scratch, repeats);
        w.wait();
      }));
      // 1: the shorter of the two was hidden entirely; 0: they ran one after the other.
      overlaps.push_back((comms.back() + computes.back() - boths.back()) /
                         std::max(std::min(comms.back(), computes.back()), 1e-9));
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double t_comm = median(comms), t_compute = median(computes), t_both = median(boths);
    const double overlap = median(overlaps);
    char line[256];
    std::snprintf(line, sizeof line, "  %-62s %8.1f %11.1f %8.1f %7.0f%%\n", c->name().c_str(), t_comm * 1e3,
                  t_compute * 1e3, t_both * 1e3, overlap * 100);
    table << line;
    EXPECT_GT(t_both, 0.0);
    if (auto* emulated = dynamic_cast<dtl::EmulatedCommunicator*>(c.get())) {
      table << "    (emulated: " << emulated->late_operations()
            << " operation(s) ended later than the model: the real reduction was the slower)\n";
    }
  }
  if (comm().rank() == 0) std::cout << table.str() << std::flush;
}


}  // namespace
