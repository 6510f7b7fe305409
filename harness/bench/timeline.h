/// @file
/// @brief A timeline of named spans written as Chrome trace JSON, for Perfetto
/// (https://ui.perfetto.dev) or chrome://tracing: one track per thread of work
/// ("compute", "comm"), one span per piece of it (a layer's backward, a bucket's
/// allreduce), so that overlap is something you can see.
///
/// Times are clock_seconds() (a steady clock shared by the processes of one
/// host), so the timelines of several ranks line up: write_gathered() merges
/// them into one file with one process per rank. A Work's start and end times
/// feed it directly (add_work()).
///
/// The format (the "Trace Event Format"): {"traceEvents": [...]} with one
/// complete event {"ph":"X", "name", "pid", "tid", "ts", "dur", "args"} per span,
/// ts and dur in microseconds, and metadata events naming processes and tracks.
#pragma once

#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"

namespace dtl {

/// @brief One span of a timeline.
struct Span {
  std::string track;                         ///< the row it is drawn in, e.g. "compute" or "comm"
  std::string name;                          ///< what it was, e.g. "backward layer 3"
  double begin_seconds = 0.0;                ///< clock_seconds() at its start
  double end_seconds = 0.0;                  ///< clock_seconds() at its end
  std::map<std::string, std::string> args;   ///< shown when the span is selected, e.g. {"bytes", "4 MiB"}
};

/// @brief Records spans and writes them as Chrome trace JSON.
///
/// Not thread-safe: record from one thread (the training loop), which is where
/// Work handles are waited for anyway.
class Timeline {
 public:
  /// @brief An empty timeline for one process.
  /// @param[in] process_id the "pid" of its events (use the rank).
  /// @param[in] process_name the process's label, e.g. "rank 0".
  explicit Timeline(int process_id = 0, std::string process_name = "");

  /// @brief Adds a span.
  /// @param[in] span the span; its end must not be before its begin.
  /// @throws InvalidArgument if end_seconds < begin_seconds.
  void add(Span span);
  /// @brief Adds a span from its parts.
  /// @param[in] track the row, e.g. "compute".
  /// @param[in] name what it was.
  /// @param[in] begin_seconds clock_seconds() at its start.
  /// @param[in] end_seconds clock_seconds() at its end.
  /// @param[in] args extra key/value pairs.
  /// @throws InvalidArgument if end_seconds < begin_seconds.
  void add(const std::string& track, const std::string& name, double begin_seconds, double end_seconds,
           std::map<std::string, std::string> args = {});
  /// @brief Adds a completed Work as a span from its start to its end, named by its description.
  /// @param[in] track the row, e.g. "comm".
  /// @param[in] work a completed operation (wait() returned).
  /// @param[in] name the span's name; empty: the Work's description.
  /// @throws InvalidArgument if `work` is not complete.
  void add_work(const std::string& track, const Work& work, const std::string& name = "");

  /// @brief Records a span on `track` from construction to destruction (a block of compute).
  class Scope {
   public:
    /// @brief Starts the span.
    /// @param[in,out] timeline where it is recorded when the scope ends.
    /// @param[in] track the row.
    /// @param[in] name what it is.
    Scope(Timeline& timeline, std::string track, std::string name);
    /// @brief Ends the span and adds it.
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline& timeline_;
    std::string track_, name_;
    double begin_;
  };

  /// @return the spans so far, in the order they were added.
  const std::vector<Span>& spans() const noexcept { return spans_; }
  /// @brief Forgets every span.
  void clear() noexcept { spans_.clear(); }

  /// @brief The timeline as a Chrome trace JSON document.
  /// @param[in] origin_seconds the clock_seconds() shown as time 0; negative: the earliest span's begin.
  /// @return {"traceEvents": [...], "displayTimeUnit": "ms"}, events sorted by begin time.
  std::string to_json(double origin_seconds = -1.0) const;
  /// @brief Writes to_json() to `path`.
  /// @param[in] path the file to write.
  /// @param[in] origin_seconds as to_json().
  /// @throws Error if the file cannot be written.
  void write(const std::string& path, double origin_seconds = -1.0) const;
  /// @brief Merges every rank's timeline into one file, written by rank 0 (time 0 = the
  /// earliest span of any rank). Collective: every rank of `comm` must call this, in the same order.
  /// @param[in] comm the ranks whose timelines are merged.
  /// @param[in] path the file rank 0 writes.
  /// @throws Error if rank 0 cannot write the file; MpiError if the gather fails.
  void write_gathered(MPI_Comm comm, const std::string& path) const;

 private:
  std::string events_json(double origin_seconds) const;  // the events, comma-separated, no brackets
  double earliest() const;

  int process_id_;
  std::string process_name_;
  std::vector<Span> spans_;
};

}  // namespace dtl
