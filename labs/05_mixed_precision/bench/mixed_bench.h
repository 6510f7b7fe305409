// Lab 05 benchmark, what its two files share (one benchmark program, ./dtl bench 05):
//   mixed_bench.cc          the timed rows: Grade/..., Comm/..., Step/... (the graded
//                           row among them, See Note [The graded row] there);
//   mixed_figures_bench.cc  what rank 0 prints and writes after the rows: memory per
//                           category, the arithmetic per element, and the runs behind
//                           the slides' figures (loss scale, gradient histogram,
//                           master weights).
// Shared: the MLP of the Step rows and of the memory table, the size of a Comm row,
// the backends by label, and the arithmetic of one average measured alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/dtype.h"

namespace dtl::lab05::mixed_bench {

inline constexpr std::int64_t kIn = 256, kHidden = 512, kClasses = 10;
inline constexpr int kDepth = 3;
inline constexpr std::int64_t kBatch = 32;                       // rows per rank
inline constexpr std::size_t kCommCount = std::size_t{1} << 20;  // elements of a Comm row

/// The communicator of a row's backend, made once per label: "mpi-half" (real shared
/// memory, 16-bit sums in reduce_half_sum() as an MPI user op) or a link the
/// EmulatedCommunicator models over it ("10GbE", "1GbE", "alpha=...,bw=...").
dtl::Communicator& backend(const std::string& label);

/// The arithmetic of one average on this rank, alone (no communication): one
/// reduce_half_sum() and one divide_half() pass over `count` 16-bit elements, or one
/// MPI_Reduce_local(MPI_SUM) and one divide of fp32. Seconds.
double arithmetic_seconds(dtl::DType dtype, std::size_t count, int world);

/// The tables and runs after the rows (mixed_figures_bench.cc); rank 0 prints them.
/// Collective over the benchmark's communicator (the loss-scale run uses every rank).
void run_after_rows();

}  // namespace dtl::lab05::mixed_bench
