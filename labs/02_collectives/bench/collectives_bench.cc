// Lab 02 benchmark: every collective of the lab beside Open MPI's, in the same
// run, in nccl-tests' columns. The grader's performance item times the student's
// build of the Bcast/16 MiB row against the reference's (grader/rubrics/02.toml).
//
// Rows: <collective>/<size>, size from 8 B to 64 MiB by 4x (quick: 8 B, 64 KiB,
// 16 MiB). Collectives: BcastTree (broadcast_binomial), BcastScatterAG
// (broadcast_scatter_allgather) — these two also at every power of two from 1 KiB
// to 1 MiB, where they may cross over —, Bcast (broadcast(), the default switch),
// Scatter, Gather, Reduce (sum), AllgatherRing, AllgatherRecDbl (powers of two
// only) and Alltoall (pairwise). Every row is float, root 0.
//   size   the bytes of the whole result, as nccl-tests counts them: the message
//          (broadcast, reduce), the root's P blocks (scatter, gather), the P blocks
//          every rank ends with (allgather) or sends (alltoall); rounded down to
//          whole blocks of at least one element;
//   count  size / 4 (elements);
//   time   median of the slowest rank's time per call; vendor = the same for the
//          Open MPI collective, run back to back with it (time/vendor = the
//          median of the per-pair ratios);
//   algbw  size / time; busbw = algbw * the collective's factor (nccl-tests):
//          1 for broadcast and reduce, (P-1)/P for scatter, gather, allgather and
//          alltoall — the share of the data that must cross a link;
//   #wrong elements of the implementation's result that differ from the
//          vendor's, summed over the ranks (checked once per row, before timing).
// At the end: the measured crossover of the two broadcasts beside the one the
// alpha-beta model predicts from lab 01's fit on this machine.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/bench/collective.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace {

using dtl::bench::comm;
namespace lab = dtl::lab02;

constexpr int kTag = 4;
constexpr int kRoot = 0;

// Lab 01's alpha-beta fits on the course machine (labs/01_point_to_point/bench/RESULTS.md):
// over all sizes, and over the rendezvous sizes (>= 8 KiB) that a broadcast's
// chunks near the crossover have.
struct Fit {
  const char* name;
  double alpha;  // s
  double beta;   // s/B
};
constexpr Fit kFits[] = {{"all sizes", 0.376e-6, 0.1022e-9}, {">= 8 KiB", 2.528e-6, 0.0862e-9}};

// One row's work: the implementation and the vendor on the same inputs, and a
// check of the first against the second (harness/bench/collective.h runs it).
using Row = dtl::bench::CollectiveRow;
Row row_of(std::size_t bytes, double bus_factor, bool rooted) {
  Row row;
  row.bytes = bytes;
  row.bus_factor = bus_factor;
  row.root = rooted ? kRoot : -1;
  return row;
}
using RowMaker = std::function<Row(std::size_t bytes)>;

std::vector<float> data(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 61) - 30);
  return v;
}

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

int ranks() { return comm().size(); }
double share() { return static_cast<double>(ranks() - 1) / ranks(); }
// Elements per rank's block when `bytes` are split over the ranks (at least one).
std::size_t block_of(std::size_t bytes) { return std::max<std::size_t>(1, bytes / sizeof(float) / ranks()); }

// The buffers of one row, shared by its lambdas.
struct Buffers {
  std::vector<float> send, impl_out, vendor_out;
};

RowMaker broadcast_row(void (*bcast)(MPI_Comm, std::span<float>, int, int)) {
  return [bcast](std::size_t bytes) {
    const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
    auto b = std::make_shared<Buffers>();
    b->impl_out = b->vendor_out = data(n, comm().rank() == kRoot ? 1 : 2);
    Row row = row_of(n * sizeof(float), 1.0, true);
    row.impl = [b, bcast] { bcast(comm(), b->impl_out, kRoot, kTag); };
    row.vendor = [b] {
      DTL_MPI_CHECK(MPI_Bcast(b->vendor_out.data(), static_cast<int>(b->vendor_out.size()), MPI_FLOAT, kRoot, comm()));
    };
    row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
    return row;
  };
}

Row scatter_row(std::size_t bytes) {
  const std::size_t block = block_of(bytes);
  auto b = std::make_shared<Buffers>();
  if (comm().rank() == kRoot) b->send = data(block * ranks(), 3);
  b->impl_out.assign(block, -1.0f);
  b->vendor_out.assign(block, -2.0f);
  Row row = row_of(block * ranks() * sizeof(float), share(), true);
  row.impl = [b] { lab::scatter<float>(comm(), b->send, b->impl_out, kRoot, kTag); };
  row.vendor = [b, block] {
    DTL_MPI_CHECK(MPI_Scatter(b->send.data(), static_cast<int>(block), MPI_FLOAT, b->vendor_out.data(),
                              static_cast<int>(block), MPI_FLOAT, kRoot, comm()));
  };
  row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
  return row;
}

Row gather_row(std::size_t bytes) {
  const std::size_t block = block_of(bytes);
  auto b = std::make_shared<Buffers>();
  b->send = data(block, comm().rank());
  const std::size_t out = comm().rank() == kRoot ? block * ranks() : 0;
  b->impl_out.assign(out, -1.0f);
  b->vendor_out.assign(out, -2.0f);
  Row row = row_of(block * ranks() * sizeof(float), share(), true);
  row.impl = [b] { lab::gather<float>(comm(), b->send, b->impl_out, kRoot, kTag); };
  row.vendor = [b, block] {
    DTL_MPI_CHECK(MPI_Gather(b->send.data(), static_cast<int>(block), MPI_FLOAT, b->vendor_out.data(),
                             static_cast<int>(block), MPI_FLOAT, kRoot, comm()));
  };
  row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
  return row;
}

Row reduce_row(std::size_t bytes) {
  const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
  auto b = std::make_shared<Buffers>();
  b->send = data(n, comm().rank());
  const std::size_t out = comm().rank() == kRoot ? n : 0;
  b->impl_out.assign(out, -1.0f);
  b->vendor_out.assign(out, -2.0f);
  Row row = row_of(n * sizeof(float), 1.0, true);
  row.impl = [b] { lab::reduce<float>(comm(), b->send, b->impl_out, dtl::ReduceOp::kSum, kRoot, kTag); };
  row.vendor = [b, n] {
    DTL_MPI_CHECK(MPI_Reduce(b->send.data(), b->vendor_out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, kRoot,
                             comm()));
  };
  row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
  return row;
}

RowMaker allgather_row(void (*allgather)(MPI_Comm, std::span<const float>, std::span<float>, int)) {
  return [allgather](std::size_t bytes) {
    const std::size_t block = block_of(bytes);
    auto b = std::make_shared<Buffers>();
    b->send = data(block, comm().rank());
    b->impl_out.assign(block * ranks(), -1.0f);
    b->vendor_out.assign(block * ranks(), -2.0f);
    Row row = row_of(block * ranks() * sizeof(float), share(), false);
    row.impl = [b, allgather] { allgather(comm(), b->send, b->impl_out, kTag); };
    row.vendor = [b, block] {
      DTL_MPI_CHECK(MPI_Allgather(b->send.data(), static_cast<int>(block), MPI_FLOAT, b->vendor_out.data(),
                                  static_cast<int>(block), MPI_FLOAT, comm()));
    };
    row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
    return row;
  };
}

Row alltoall_row(std::size_t bytes) {
  const std::size_t block = block_of(bytes);
  auto b = std::make_shared<Buffers>();
  b->send = data(block * ranks(), comm().rank());
  b->impl_out.assign(block * ranks(), -1.0f);
  b->vendor_out.assign(block * ranks(), -2.0f);
  Row row = row_of(block * ranks() * sizeof(float), share(), false);
  row.impl = [b] { lab::alltoall_pairwise<float>(comm(), b->send, b->impl_out, kTag); };
  row.vendor = [b, block] {
    DTL_MPI_CHECK(MPI_Alltoall(b->send.data(), static_cast<int>(block), MPI_FLOAT, b->vendor_out.data(),
                               static_cast<int>(block), MPI_FLOAT, comm()));
  };
  row.wrong = [b] { return differing(b->impl_out, b->vendor_out); };
  return row;
}

// Rank 0's medians of the two broadcast algorithms, by size, for the crossover.
std::map<std::size_t, double>& medians(const std::string& collective) {
  static std::map<std::string, std::map<std::size_t, double>> by_collective;
  return by_collective[collective];
}

void run_row(benchmark::State& state, const std::string& collective, const RowMaker& make, std::size_t bytes) {
  const double seconds = dtl::bench::run_collective_row(state, make(bytes));
  if (seconds >= 0) medians(collective)[bytes] = seconds;  // broadcast rows: row.bytes == bytes
}

int iterations(std::size_t bytes) {
  if (dtl::bench::quick()) return bytes >= (1u << 20) ? 10 : 20;
  if (bytes >= (16u << 20)) return 8;
  if (bytes >= (1u << 20)) return 20;
  return 60;
}

void add_row(const std::string& collective, const RowMaker& make, std::size_t bytes) {
  const std::string name = collective + "/" + dtl::format_bytes(bytes);
  benchmark::RegisterBenchmark(name.c_str(), [collective, make, bytes](benchmark::State& state) {
    run_row(state, collective, make, bytes);
  })
      ->Iterations(iterations(bytes))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

void register_rows() {
  const bool power_of_two = (ranks() & (ranks() - 1)) == 0;
  std::vector<std::size_t> sizes = {8};  // 8 B, then 16 B to 64 MiB by 4x
  for (std::size_t bytes = 16; bytes <= (64u << 20); bytes *= 4) sizes.push_back(bytes);
  if (dtl::bench::quick()) sizes = {8, 64u << 10, 16u << 20};
  std::vector<std::size_t> crossover_sizes = sizes;  // the two broadcasts: every power of two in 1 KiB .. 1 MiB too
  if (!dtl::bench::quick()) {
    for (std::size_t bytes = 1024; bytes <= (1u << 20); bytes *= 2) crossover_sizes.push_back(bytes);
    std::sort(crossover_sizes.begin(), crossover_sizes.end());
    crossover_sizes.erase(std::unique(crossover_sizes.begin(), crossover_sizes.end()), crossover_sizes.end());
  }

  for (std::size_t bytes : crossover_sizes) add_row("BcastTree", broadcast_row(&lab::broadcast_binomial<float>), bytes);
  for (std::size_t bytes : crossover_sizes) {
    add_row("BcastScatterAG", broadcast_row(&lab::broadcast_scatter_allgather<float>), bytes);
  }
  const auto dispatch = [](MPI_Comm c, std::span<float> buf, int root, int tag) { lab::broadcast<float>(c, buf, root, tag); };
  for (std::size_t bytes : sizes) add_row("Bcast", broadcast_row(dispatch), bytes);
  for (std::size_t bytes : sizes) add_row("Scatter", scatter_row, bytes);
  for (std::size_t bytes : sizes) add_row("Gather", gather_row, bytes);
  for (std::size_t bytes : sizes) add_row("Reduce", reduce_row, bytes);
  for (std::size_t bytes : sizes) add_row("AllgatherRing", allgather_row(&lab::allgather_ring<float>), bytes);
  if (power_of_two) {
    for (std::size_t bytes : sizes) {
      add_row("AllgatherRecDbl", allgather_row(&lab::allgather_recursive_doubling<float>), bytes);
    }
  }
  for (std::size_t bytes : sizes) add_row("Alltoall", alltoall_row, bytes);

  if (comm().rank() == 0) {
    std::printf("# float, root 0; size and count as nccl-tests; busbw factor 1 (broadcast, reduce) or (P-1)/P "
                "(scatter, gather, allgather, alltoall); #wrong = elements differing from the vendor's result\n");
  }
}

// The smallest size from which scatter + allgather beat the tree at that size and
// every larger one measured, and the model's n*, printed by rank 0.
void report_crossover() {
  const auto& tree = medians("BcastTree");
  const auto& sag = medians("BcastScatterAG");
  if (comm().rank() != 0 || tree.empty() || sag.empty()) return;  // rank 0 alone has the medians of both rows
  std::size_t from = 0;
  for (auto it = tree.rbegin(); it != tree.rend(); ++it) {
    const auto other = sag.find(it->first);
    if (other == sag.end() || other->second >= it->second) break;
    from = it->first;
  }
  const int p = ranks();
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  const double denominator = rounds - 2.0 * (p - 1) / p;
  std::printf("# broadcast crossover at %d ranks: measured, scatter+allgather faster from %s on\n", p,
              from == 0 ? "no measured size" : dtl::format_bytes(from).c_str());
  for (const Fit& fit : kFits) {
    std::printf("# alpha-beta model, lab 01's fit over %s (alpha %.2f us, beta %.4f ns/B): ", fit.name,
                fit.alpha * 1e6, fit.beta * 1e9);
    if (denominator > 0) {
      std::printf("n* = (P-1) alpha / ((L - 2(P-1)/P) beta) = %.0f B\n", (p - 1) * fit.alpha / (denominator * fit.beta));
    } else {
      std::printf("never (with %d rank(s) the tree's bandwidth term is not the larger)\n", p);
    }
  }
}

const bool registered = [] {
  dtl::bench::set_columns(dtl::bench::collective_columns(/*with_root=*/true));
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(report_crossover);
  return true;
}();

}  // namespace
