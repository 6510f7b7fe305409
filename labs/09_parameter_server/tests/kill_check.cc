// Lab 09: a worker really killed (SIGKILL) in the middle of a run.
//
//   ./dtl mpirun --enable-recovery -n 4 build/labs/09_parameter_server/lab09_student_kill ssp
//   (bsp, ssp or asp; a second argument sets S, the servers: 1 by default)
//
// The graded fault tests (fault_test.cc) use a *silent* worker, because under
// Open MPI a dead rank ends the whole job, and the test main's per-test
// collectives need every rank (Note [Silent workers]). Open MPI 4.1's
// `mpirun --enable-recovery` keeps the job alive when a rank dies, so here
// worker 0 kills itself with SIGKILL when it starts step kKillAt: no finish(),
// no destructor, whatever it sent still in flight. A server cannot tell a dead
// worker from a silent one (both stop sending), so what the fault tests check
// must hold here too:
//   - SSP and ASP: every server finds worker 0 lost, and only it; the live
//     workers finish every step; SSP's servers apply every step, and their event
//     log respects the bound;
//   - BSP: every server fails, naming the dead worker's rank; every live worker
//     stops with an error naming that rank and step kKillAt.
//
// Nothing collective may run after the kill (a collective would wait for the
// dead rank forever; so can MPI_Finalize, which is skipped), and mpirun's exit
// code is 0 under --enable-recovery whatever the ranks return, so each survivor
// sends its verdict to rank 0 (a server: always alive), which prints one line:
// "kill check: passed ..." or "kill check: FAILED ...". ctest matches that line.
// Every rank gives up, saying where it was, after kGiveUpSeconds.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "labs/09_parameter_server/tests/ps_test_util.h"

namespace {

using namespace lab09_test;  // the model, its rows, the test's key shards, the bound check

constexpr int kSteps = 6;
constexpr int kKillAt = 2;                 // worker 0 dies when it starts this step
constexpr double kTimeout = 1.5;           // the servers' timeout (as the fault tests')
constexpr double kGiveUpSeconds = 60.0;    // a survivor still running then has hung
constexpr int kVerdictTag = 77;

std::string verdict_of_server(const lab09::ServerReport& report, const std::vector<lab09::Event>& events,
                              Consistency c, int servers, int workers) {
  const std::string dead = "(rank " + std::to_string(servers) + ")";
  if (report.lost != std::vector<int>{0}) return "did not find worker 0 lost (and only it)";
  if (c == Consistency::kBsp) {
    if (!report.failed) return "BSP went on without worker 0";
    if (report.error.find(dead) == std::string::npos) return "the error does not name " + dead + ": " + report.error;
    return "";
  }
  if (report.failed) return "failed: " + report.error;
  if (c == Consistency::kSsp) {
    const int want = workers > 1 ? kSteps : kKillAt;
    if (report.version != want) return "final version " + std::to_string(report.version) + ", expected " + std::to_string(want);
    if (!log_respects_bound(events, workers, 1)) return "the event log breaks SSP's bound (s = 1)";
  }
  return "";
}

std::string verdict_of_worker(const lab09::TrainReport& train, Consistency c, int servers) {
  const std::string dead = "(rank " + std::to_string(servers) + ")";
  if (c == Consistency::kBsp) {
    if (train.error.find(dead) == std::string::npos || train.error.find("step " + std::to_string(kKillAt)) == std::string::npos) {
      return "the error must name the dead worker " + dead + " and step " + std::to_string(kKillAt) + ", got: \"" +
             train.error + "\"";
    }
    return "";
  }
  if (train.steps_done != kSteps) {
    return "finished " + std::to_string(train.steps_done) + " of " + std::to_string(kSteps) + " steps: " + train.error;
  }
  return "";
}

}  // namespace

// The shared test helpers name comm().rank() in their messages. This program has
// no test main to make comm(), so it is a duplicate of the world, made at the
// start of main() (collective: before anything can die) and used for the verdicts.
const dtl::Comm& dtl::testing::comm() {
  static const Comm world = Comm::world();
  return world;
}

int main(int argc, char** argv) {
  int provided = 0;  // the dependency engine's threads pull at once
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string model_name = argc > 1 ? argv[1] : "ssp";
  const int servers = argc > 2 ? std::atoi(argv[2]) : 1;
  const Consistency c = model_name == "bsp" ? Consistency::kBsp : model_name == "asp" ? Consistency::kAsp
                                                                                      : Consistency::kSsp;
  if ((model_name != "bsp" && model_name != "ssp" && model_name != "asp") || servers < 1 || size - servers < 2) {
    if (rank == 0) std::fprintf(stderr, "usage: mpirun --enable-recovery -n N %s bsp|ssp|asp [S], with N >= S + 2\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const MPI_Comm verdicts = dtl::testing::comm();  // made before the kill: nothing collective after it
  static std::atomic<const char*> where{"before the run"};  // read by the give-up thread
  std::thread([rank] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kGiveUpSeconds));
    std::printf("kill check: FAILED: rank %d still running after %.0f s, %s\n", rank, kGiveUpSeconds, where.load());
    std::fflush(stdout);
    std::_Exit(3);
  }).detach();

  lab09::PsOptions options;
  options.servers = servers;
  options.consistency = c;
  options.staleness = 1;
  options.sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.0f};
  options.timeout_seconds = kTimeout;
  nn::Model model = make_model();
  const std::vector<std::int64_t> sizes = key_sizes_of(model);
  std::string verdict;
  try {
    lab09::PsGroup group(MPI_COMM_WORLD, options, sizes, even_bounds(static_cast<int>(sizes.size()), servers));
    if (group.is_server()) {
      lab09::ParameterServer server(group, values_of(model));
      where = "in ParameterServer::run()";
      const lab09::ServerReport report = server.run();
      verdict = verdict_of_server(report, server.events(), c, servers, group.workers());
    } else {
      const int w = group.worker_index();
      const lab09::BatchFn rows = worker_batches(w, group.workers(), 8);
      const lab09::BatchFn batch = [w, &rows](int step, nn::Tensor& x, nn::Tensor& y) {
        if (w == 0 && step == kKillAt) std::raise(SIGKILL);  // a real death: nothing after this line runs
        rows(step, x, y);
      };
      lab09::TrainOptions t;
      t.steps = kSteps;
      lab09::WorkerClient client(group);
      where = "in train_worker()";
      verdict = verdict_of_worker(lab09::train_worker(client, model, batch, t), c, servers);
      where = "in ~WorkerClient()";
    }
  } catch (const std::exception& e) {
    verdict = std::string("threw: ") + e.what();
  }
  where = "sending its verdict to rank 0";
  const std::string line = "rank " + std::to_string(rank) + ": " + (verdict.empty() ? "ok" : verdict);
  if (rank != 0) {
    MPI_Send(line.data(), static_cast<int>(line.size()), MPI_CHAR, 0, kVerdictTag, verdicts);
    where = "waiting for rank 0 to take its verdict";
    MPI_Recv(nullptr, 0, MPI_CHAR, 0, kVerdictTag, verdicts, MPI_STATUS_IGNORE);
  } else {
    // Every survivor's: size - 1 lines with rank 0's (worker 0, rank S, is dead;
    // if it reports, it never died, and its line is awaited too).
    where = "waiting for the survivors' verdicts";
    std::vector<std::string> lines{line};
    std::vector<int> sources;
    bool all_ok = verdict.empty();
    int expected = size - 1;
    const double deadline = MPI_Wtime() + kGiveUpSeconds / 2;
    while (static_cast<int>(lines.size()) < expected && MPI_Wtime() < deadline) {
      int found = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kVerdictTag, verdicts, &found, &status);
      if (!found) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      int n = 0;
      MPI_Get_count(&status, MPI_CHAR, &n);
      std::string text(static_cast<std::size_t>(n), '\0');
      MPI_Recv(text.data(), n, MPI_CHAR, status.MPI_SOURCE, kVerdictTag, verdicts, MPI_STATUS_IGNORE);
      if (status.MPI_SOURCE == servers) {
        text += " (but worker 0 was to be killed at step " + std::to_string(kKillAt) + ": it never got there)";
        expected = size;
      }
      all_ok = all_ok && text.ends_with(": ok");
      lines.push_back(text);
      sources.push_back(status.MPI_SOURCE);
    }
    for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
    const bool complete = static_cast<int>(lines.size()) == expected;
    if (!complete) std::printf("  (%d of %d survivors reported)\n", static_cast<int>(lines.size()), expected);
    std::printf("kill check: %s: %s, S = %d, W = %d, worker 0 (rank %d) killed with SIGKILL at step %d\n",
                all_ok && complete ? "passed" : "FAILED", model_name.c_str(), servers, size - servers, servers, kKillAt);
    std::fflush(stdout);
    where = "telling the survivors their verdicts arrived";
    for (int source : sources) MPI_Ssend(nullptr, 0, MPI_CHAR, source, kVerdictTag, verdicts);
  }
  // No MPI_Finalize: with a rank dead it can wait forever (it did here, at 3 ranks).
  // Under --enable-recovery mpirun lets a process end without it.
  std::fflush(stdout);
  std::_Exit(0);
}
