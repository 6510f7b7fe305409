// Chrome trace JSON from named spans. See timeline.h for the format.
#include "harness/bench/timeline.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "harness/comm/mpi_comm.h"
#include "harness/json.h"

namespace dtl {

namespace {

std::string microseconds(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e6);
  return buf;
}

}  // namespace

Timeline::Timeline(int process_id, std::string process_name)
    : process_id_(process_id),
      process_name_(process_name.empty() ? "rank " + std::to_string(process_id) : std::move(process_name)) {}

void Timeline::add(Span span) {
  DTL_REQUIRE_ARG(span.end_seconds >= span.begin_seconds, "Timeline::add", "span",
                  "'" + span.name + "' ends before it begins");
  spans_.push_back(std::move(span));
}

void Timeline::add(const std::string& track, const std::string& name, double begin_seconds, double end_seconds,
                   std::map<std::string, std::string> args) {
  add(Span{track, name, begin_seconds, end_seconds, std::move(args)});
}

void Timeline::add_work(const std::string& track, const Work& work, const std::string& name) {
  DTL_REQUIRE_ARG(work.completed(), "Timeline::add_work", "work",
                  "is '" + work.description() + "', not complete yet: wait() for it first");
  add(track, name.empty() ? work.description() : name, work.start_seconds(), work.end_seconds(),
      {{"description", work.description()},
       {"queued_us", microseconds(work.start_seconds() - work.issue_seconds())}});
}

Timeline::Scope::Scope(Timeline& timeline, std::string track, std::string name)
    : timeline_(timeline), track_(std::move(track)), name_(std::move(name)), begin_(clock_seconds()) {}

Timeline::Scope::~Scope() { timeline_.add(track_, name_, begin_, clock_seconds()); }

double Timeline::earliest() const {
  double first = std::numeric_limits<double>::infinity();
  for (const auto& span : spans_) first = std::min(first, span.begin_seconds);
  return spans_.empty() ? 0.0 : first;
}

std::string Timeline::events_json(double origin_seconds) const {
  // Tracks become thread ids in the order they first appear, named by metadata events.
  std::vector<std::string> tracks;
  auto track_id = [&](const std::string& track) {
    auto it = std::find(tracks.begin(), tracks.end(), track);
    if (it == tracks.end()) {
      tracks.push_back(track);
      return static_cast<int>(tracks.size());
    }
    return static_cast<int>(it - tracks.begin()) + 1;
  };
  std::vector<std::size_t> order(spans_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return spans_[a].begin_seconds < spans_[b].begin_seconds; });
  const std::string pid = std::to_string(process_id_);
  std::ostringstream events;
  for (std::size_t i : order) {
    const Span& span = spans_[i];
    events << ",\n{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << track_id(span.track)
           << ",\"name\":" << json_quoted(span.name) << ",\"ts\":" << microseconds(span.begin_seconds - origin_seconds)
           << ",\"dur\":" << microseconds(span.end_seconds - span.begin_seconds) << ",\"args\":{";
    const char* sep = "";
    for (const auto& [key, value] : span.args) {
      events << sep << json_quoted(key) << ":" << json_quoted(value);
      sep = ",";
    }
    events << "}}";
  }
  std::ostringstream out;
  out << "{\"ph\":\"M\",\"pid\":" << pid << ",\"name\":\"process_name\",\"args\":{\"name\":"
      << json_quoted(process_name_) << "}}";
  for (std::size_t t = 0; t < tracks.size(); ++t) {
    out << ",\n{\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << t + 1
        << ",\"name\":\"thread_name\",\"args\":{\"name\":" << json_quoted(tracks[t]) << "}}";
  }
  return out.str() + events.str();
}

std::string Timeline::to_json(double origin_seconds) const {
  const double origin = origin_seconds < 0 ? earliest() : origin_seconds;
  return "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + events_json(origin) + "\n]}\n";
}

namespace {
void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw Error("Timeline: cannot write " + path + " [" + where_am_i() + "]");
}
}  // namespace

void Timeline::write(const std::string& path, double origin_seconds) const {
  write_file(path, to_json(origin_seconds));
}

void Timeline::write_gathered(MPI_Comm comm, const std::string& path) const {
  const auto [rank, size] = rank_and_size(comm);
  // Time 0 is the earliest span of any rank; an empty timeline does not vote.
  const double mine = spans_.empty() ? std::numeric_limits<double>::infinity() : earliest();
  double origin = 0.0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &origin, 1, MPI_DOUBLE, MPI_MIN, comm));
  if (origin == std::numeric_limits<double>::infinity()) origin = 0.0;
  const std::string text = events_json(origin);
  int length = to_mpi_count(text.size(), "Timeline::write_gathered", "timeline");
  std::vector<int> lengths(size), offsets(size);
  DTL_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::vector<char> all(rank == 0 ? total + 1 : 1);
  DTL_MPI_CHECK(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                            0, comm));
  if (rank != 0) return;
  std::string merged = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (int r = 0; r < size; ++r) {
    merged += (r == 0 ? "" : ",\n") + std::string(all.data() + offsets[r], lengths[r]);
  }
  write_file(path, merged + "\n]}\n");
}

}  // namespace dtl
