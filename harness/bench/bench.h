/// @file
/// @brief Benchmarks under MPI: paired timing of an implementation beside the
/// vendor's, the slowest rank's time, medians and ratios, and one table format.
///
/// A machine is noisy, so a row never rests on one absolute time. Each iteration
/// runs the implementation and the vendor call back to back (a pair), each
/// started together on all ranks (barrier) and timed as the slowest rank's time
/// (MPI_MAX). The row reports the median of each and the median of the per-pair
/// ratios: noise that hits both halves of a pair cancels in the ratio.
///
/// Every rank runs the same iterations: register rows with a fixed
/// `->Iterations(n)` and `->UseManualTime()`; the bench main does the rest.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"

namespace dtl::bench {

/// @brief The benchmark's communicator.
/// @return a duplicate of MPI_COMM_WORLD, valid while benchmarks run.
const Comm& comm();

/// @brief The first `n` ranks of comm() as a communicator of their own, for a row that
/// runs on fewer ranks than the benchmark (a pipeline of P stages, a tensor group of T).
///
/// Collective over comm(): every rank calls it, with the same `n`.
/// @param[in] n how many ranks, from rank 0.
/// @return the communicator on ranks [0, n) (rank order kept); an empty Comm
///         (MPI_COMM_NULL) on the others, which then sit the row out.
/// @throws MpiError if MPI_Comm_split fails.
Comm first_ranks(int n);

/// @brief Collects paired samples for one row.
class PairedTimer {
 public:
  /// @brief Runs `fn` on every rank after a barrier; records the slowest rank's seconds.
  /// Collective: every rank must call it the same number of times.
  /// @param[in] fn the implementation's work for one sample.
  /// @return the sample: the slowest rank's seconds.
  double time_impl(const std::function<void()>& fn);
  /// @brief The same for the vendor's call.
  /// @param[in] fn the vendor's work for one sample.
  /// @return the sample: the slowest rank's seconds.
  double time_vendor(const std::function<void()>& fn);
  /// @brief One pair: the implementation and the vendor, each timed as above,
  /// in alternating order (impl first on even pairs, vendor first on odd ones)
  /// so that whatever the first call of a pair leaves behind (a warm cache, a
  /// drained queue) favours neither side.
  /// @param[in] impl the implementation's work for one sample.
  /// @param[in] vendor the vendor's work for one sample.
  /// @return the implementation's sample, seconds.
  double time_pair(const std::function<void()>& impl, const std::function<void()>& vendor);
  /// @return median seconds of the implementation's samples.
  double impl_median() const;
  /// @return median seconds of the vendor's samples.
  double vendor_median() const;
  /// @return median over pairs of impl/vendor (1.0 = as fast as the vendor).
  double ratio_median() const;

 private:
  std::vector<double> impl_, vendor_;
};

/// @brief The median of `values`.
/// @param[in] values the samples (taken by value: they are partially sorted).
/// @return the median, or 0 when there are none.
double median(std::vector<double> values);

/// @brief One column of the printed table: a counter name, a header and a printf format.
struct Column {
  std::string counter;  ///< key in benchmark::State::counters
  std::string header;   ///< column title
  std::string format;   ///< printf format for the value, e.g. "%10.2f"
};

/// @brief Chooses the columns rank 0 prints (after the row's name). Call before main runs
/// the benchmarks, e.g. from a static initializer in the lab's *_bench.cc.
/// @param[in] columns the columns, in order.
void set_columns(std::vector<Column> columns);

/// @brief True when the run was started with --dtl_quick (`./dtl bench NN --quick`):
/// rows should use fewer sizes and iterations, for a summary in seconds.
/// @return whether quick mode is on.
bool quick();

/// @brief Registers `fn` to run on every rank once the command line is parsed and
/// before any benchmark runs: the place to call benchmark::RegisterBenchmark, so
/// that rows can depend on quick(). Call from a static initializer.
/// @param[in] fn the registration function.
void at_start(std::function<void()> fn);

/// @brief Registers `fn` to run on every rank after all benchmarks (e.g. a model fit
/// over the rows' results). Collective if `fn` is.
/// @param[in] fn the function to run.
void at_finish(std::function<void()> fn);

}  // namespace dtl::bench
