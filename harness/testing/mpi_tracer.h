/// @file
/// @brief A tracer on the MPI profiling interface (PMPI): what each rank is
/// blocked in, and how many calls and bytes a piece of code used.
///
/// Linking mpi_tracer.cc into a program defines MPI_Send, MPI_Recv, MPI_Wait, ...
/// which record the call and forward to PMPI_Send, PMPI_Recv, ... (every MPI
/// library provides the PMPI_ names for exactly this). Two uses:
///  - deadlock reports: each rank keeps "which call am I in, with which peer, tag
///    and size, since when" in memory and, once enable_state_file() is called, in
///    a small memory-mapped file `DIR/rank<N>.state` that another process (the
///    test main's watchdog, the grader) can read while this rank is stuck;
///  - shape checks (labs 02 and 03): counts of calls by name and of point-to-point
///    messages and bytes sent, so a test can prove a submission called no vendor
///    collective and sent exactly the messages its algorithm should.
///
/// Covered: blocking and nonblocking point-to-point, waits and tests, probes, and
/// the blocking and nonblocking collectives. Not yet covered: persistent
/// requests (MPI_Send_init/MPI_Start), matched probes (MPI_Mprobe), one-sided
/// (MPI_Put/MPI_Get) and neighbourhood collectives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtl::trace {

/// @brief What the traced code did since the last reset_counts().
struct Counts {
  std::map<std::string, std::int64_t> calls;  ///< MPI function name -> number of calls
  std::int64_t messages_sent = 0;             ///< point-to-point sends started
  std::int64_t bytes_sent = 0;                ///< payload bytes of those sends
  std::map<int, std::int64_t> sends_by_tag;   ///< tag -> point-to-point sends started with it
  std::int64_t any_source_receives = 0;       ///< receives and probes with MPI_ANY_SOURCE
  std::int64_t any_tag_receives = 0;          ///< receives and probes with MPI_ANY_TAG
  /// @param[in] name an MPI function, e.g. "MPI_Bcast".
  /// @return how many times it was called.
  std::int64_t count(const std::string& name) const;
};

/// @brief Mirrors this rank's state into `dir/rank<world_rank>.state` from now on.
/// @param[in] dir an existing, writable folder shared by all ranks of the job.
/// @param[in] world_rank this process's rank in MPI_COMM_WORLD.
/// @throws Error if the file cannot be created.
void enable_state_file(const std::string& dir, int world_rank);

/// @brief This rank's state.
/// @return e.g. "in MPI_Send(dest=1, tag=0, 1 MiB) for 10.0 s".
std::string describe_self();

/// @brief Reads every rank's state file and writes one line per rank.
/// @param[in] dir the folder given to enable_state_file().
/// @param[in] world_size how many rank files to expect.
/// @param[in] min_seconds a rank counts as blocked only after this long in one call.
/// @param[out] all_blocked set to true when every rank has been inside one blocking
///             MPI call for at least `min_seconds` (a deadlock, not a slow run).
/// @return lines such as "rank 0: in MPI_Send(dest=1, tag=0, 1 MiB) for 10.0 s".
std::string describe_all(const std::string& dir, int world_size, double min_seconds, bool* all_blocked);

/// @brief One rank's state, as its state file says.
struct RankState {
  std::string state;     ///< "blocked", "polling", "running", or "" (no file: the rank may have exited)
  double seconds = 0.0;  ///< how long the rank has been in its current call (blocked or polling)
  std::string call;      ///< that call, e.g. "MPI_Recv(source=0, tag=3, up to 4 B)"
};

/// @brief Reads every rank's state file.
/// @param[in] dir the folder given to enable_state_file().
/// @param[in] world_size how many rank files to expect.
/// @return one RankState per rank, in rank order.
std::vector<RankState> read_states(const std::string& dir, int world_size);

/// @brief Marks this rank as waiting inside the test harness (not in the code
/// under test) for as long as the object lives, so that a timeout report says
/// "finished the test, waiting for the other ranks" instead of "running its own code".
class HarnessWait {
 public:
  /// @param[in] what what the rank waits for, e.g. "the other ranks to finish Ring.Large".
  explicit HarnessWait(const std::string& what);
  /// @brief Back to "running": the harness is done waiting.
  ~HarnessWait();
  HarnessWait(const HarnessWait&) = delete;
  HarnessWait& operator=(const HarnessWait&) = delete;
};

/// @brief The counters since the last reset_counts() (this rank only).
/// @return a copy of them.
Counts counts();

/// @brief Zeroes the counters.
void reset_counts();

}  // namespace dtl::trace
