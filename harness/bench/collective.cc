// One collective row: check, pair-time, report (see collective.h).
#include "harness/bench/collective.h"

#include <mpi.h>

#include "harness/bench/bench.h"
#include "harness/error.h"

namespace dtl::bench {

double run_collective_row(benchmark::State& state, const CollectiveRow& row) {
  // The first call is the warm-up and the result to check. An error in it must
  // skip the row on every rank alike, or the others would wait in the check below.
  std::string error;
  try {
    row.impl();
  } catch (const dtl::Error& e) {
    error = e.what();
  }
  int failed = error.empty() ? 0 : 1, any_failed = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, comm()));
  if (any_failed) {
    state.SkipWithError(error.empty() ? "another rank failed in the implementation" : error.c_str());
    return -1;
  }
  row.vendor();
  const auto mine = static_cast<long long>(row.wrong());
  long long wrong = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm()));

  PairedTimer timer;
  std::vector<PairedTimer> others(row.other_vendors.size());
  for (auto _ : state) {
    state.SetIterationTime(timer.time_pair(row.impl, row.vendor));
    for (std::size_t i = 0; i < others.size(); ++i) others[i].time_pair(row.impl, row.other_vendors[i].second);
  }
  const double seconds = timer.impl_median();
  const double algbw = seconds > 0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0.0;
  state.counters["bytes"] = static_cast<double>(row.bytes);
  state.counters["count"] = static_cast<double>(row.bytes / row.type_size);
  state.counters["type"] = static_cast<double>(row.type_size);
  if (row.root >= 0) state.counters["root"] = row.root;
  state.counters["time_us"] = seconds * 1e6;
  state.counters["vendor_us"] = timer.vendor_median() * 1e6;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * row.bus_factor;
  state.counters["wrong"] = static_cast<double>(wrong);
  state.counters["ratio"] = timer.ratio_median();
  for (std::size_t i = 0; i < others.size(); ++i) {
    state.counters[row.other_vendors[i].first + "_us"] = others[i].vendor_median() * 1e6;
    state.counters["ratio_" + row.other_vendors[i].first] = others[i].ratio_median();
  }
  return seconds;
}

std::vector<Column> collective_columns(bool with_root, const std::vector<std::string>& other_vendors) {
  // The type cell prints the format itself: every collective row here is float.
  std::vector<Column> columns{{"bytes", "size (B)", "%10.0f"}, {"count", "count", "%10.0f"}, {"type", "type", "float"}};
  if (with_root) columns.push_back({"root", "root", "%4.0f"});
  columns.push_back({"time_us", "time (us)", "%10.2f"});
  columns.push_back({"vendor_us", "vendor (us)", "%11.2f"});
  const auto width = [](const std::string& header) { return "%" + std::to_string(header.size()) + ".2f"; };
  for (const auto& name : other_vendors) {
    const std::string header = name + " (us)";
    columns.push_back({name + "_us", header, width(header)});
  }
  columns.push_back({"algbw", "algbw (GB/s)", "%12.3f"});
  columns.push_back({"busbw", "busbw (GB/s)", "%12.3f"});
  columns.push_back({"wrong", "#wrong", "%6.0f"});
  columns.push_back({"ratio", "time/vendor", "%11.2f"});
  for (const auto& name : other_vendors) {
    const std::string header = "time/" + name;
    columns.push_back({"ratio_" + name, header, width(header)});
  }
  return columns;
}

}  // namespace dtl::bench
