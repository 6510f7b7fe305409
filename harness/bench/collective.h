/// @file
/// @brief One benchmark row of a collective in nccl-tests' columns, timed beside the vendor's.
///
/// Every collective lab measures the same way: check the implementation against
/// the vendor once (\#wrong), then time the two in alternating pairs
/// (PairedTimer), and report size, count, type, time, algbw, busbw, \#wrong and
/// the time/vendor ratio. A row may also name further vendors (e.g. Open MPI
/// with a forced algorithm); each gets a time column `<name>_us` and a ratio
/// column `ratio_<name>`, from its own pairs with the implementation.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness/bench/bench.h"

namespace dtl::bench {

/// @brief What one row measures; built per size by the lab's benchmark.
struct CollectiveRow {
  std::size_t bytes = 0;      ///< nccl-tests' size: the bytes of the whole result (see the lab's bench header)
  std::size_t type_size = 4;  ///< bytes per element (count = bytes / type_size)
  double bus_factor = 1.0;    ///< busbw / algbw: allreduce 2(P-1)/P, reduce-scatter and allgather (P-1)/P
  int root = -1;              ///< the root, printed in the root column; -1 for collectives without one
  std::function<void()> impl;    ///< one call of the implementation
  std::function<void()> vendor;  ///< one call of the vendor's collective on the same input
  std::function<std::size_t()> wrong;  ///< this rank's elements where impl's result differs from vendor's
  /// Further vendors, each timed in its own pairs with impl: (column name, one call).
  std::vector<std::pair<std::string, std::function<void()>>> other_vendors;
};

/// @brief Runs one row: checks impl against vendor, times them, sets the counters.
///
/// Counters set: bytes, count, type, root (when >= 0), time_us, vendor_us, algbw,
/// busbw (GB/s), wrong (summed over ranks), ratio (median of per-pair time/vendor),
/// and `<name>_us`, `ratio_<name>` per other vendor. An exception from the first
/// call of impl (NotImplemented, say) skips the row on every rank with its message.
/// Collective: every rank calls it with the same row shape, under fixed iterations.
/// @param[in,out] state the benchmark's state (iterations fixed, manual time).
/// @param[in] row the row.
/// @return the implementation's median seconds, or -1 when the row was skipped.
double run_collective_row(benchmark::State& state, const CollectiveRow& row);

/// @brief The printed table's columns for run_collective_row()'s counters, in
/// nccl-tests' order: size, count, type, [root,] time, vendor time, each other
/// vendor's time, algbw, busbw, \#wrong, time/vendor, time/each other vendor.
/// A collective lab's benchmark passes them to set_columns().
/// @param[in] with_root whether the rows have a root (broadcast, reduce, ...).
/// @param[in] other_vendors the names of CollectiveRow::other_vendors, in order.
/// @return the columns.
std::vector<Column> collective_columns(bool with_root, const std::vector<std::string>& other_vendors = {});

}  // namespace dtl::bench
