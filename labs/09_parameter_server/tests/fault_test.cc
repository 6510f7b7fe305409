// Lab 09: faults and checkpoints (tasks C, D and E).
//
// A silent worker (TrainOptions::silent_from_step: it stops all traffic, as if
// dead, and only joins the others again at the test's end; Note [Silent
// workers] says why a real kill is not used here, and kill_check.cc does one)
// must be found by the servers' timeout. SSP and ASP go on without it and finish every step; BSP
// fails the step it can no longer complete, and every live worker reports an
// error naming the lost worker's rank and the step. Nothing here measures time:
// the timeout only bounds how long the test takes.
//
// Checkpoints: a BSP run with momentum stopped after k1 steps, checkpointed,
// and restored into new servers (a new group) that go on for k2 steps, equals
// one process after k1 + k2 steps. Momentum makes the test fail if the
// optimizer's state is not in the checkpoint.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/error.h"
#include "labs/09_parameter_server/tests/ps_test_util.h"

namespace lab09_test {
namespace {

const nn::SgdOptions kSgd{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.0f};
constexpr int kSteps = 6;
constexpr int kSilentFrom = 2;

RunSpec silent_run(Consistency c, int servers) {
  RunSpec spec;
  spec.options.servers = servers;
  spec.options.consistency = c;
  spec.options.staleness = 1;
  spec.options.sgd = kSgd;
  spec.options.timeout_seconds = 1.5;  // far above a step here (milliseconds), so only the silent worker is lost
  spec.steps = kSteps;
  spec.setup = [](int w) {
    lab09::TrainOptions t;
    t.steps = kSteps;
    t.overlap = false;
    t.silent_from_step = w == 0 ? kSilentFrom : -1;  // worker 0 (rank S) goes silent
    return t;
  };
  return spec;
}

TEST(Faults, SilentWorkerIsLostAndSspAspGoOn) {
  LAB09_NEEDS_TWO_RANKS();
  // SSP with every server count; ASP (which never waits, so only the end of the run
  // needs the silent worker found) with the most servers.
  const int most = server_counts().back();
  for (auto [c, servers] : {std::pair{Consistency::kSsp, 1}, std::pair{Consistency::kSsp, 2},
                            std::pair{Consistency::kAsp, most}}) {
    if (servers > most) continue;
    {
      const RunSpec spec = silent_run(c, servers);
      const PsRun run = run_ps(spec);
      const std::string what = std::string(lab09::consistency_name(c)) + ", S = " + std::to_string(servers);
      EXPECT_EQ(run.error, "") << "rank " << comm().rank() << " (" << what << ") threw";
      if (run.server) {
        EXPECT_FALSE(run.report.failed) << "rank " << comm().rank() << " (" << what << "): " << run.report.error;
        EXPECT_EQ(run.report.lost, std::vector<int>{0})
            << "rank " << comm().rank() << ": server " << comm().rank() << " must find worker 0 (rank " << servers
            << ") lost, and only it (" << what << ")";
        if (c == Consistency::kSsp && run.error.empty()) {
          // Every step applied, the silent worker's later steps with the others' gradients.
          EXPECT_EQ(run.report.version, run.workers > 1 ? kSteps : kSilentFrom)
              << "rank " << comm().rank() << ": the final version (" << what << ")";
          EXPECT_TRUE(log_respects_bound(run.events, run.workers, 1)) << what;
        }
      } else if (comm().rank() == servers) {
        EXPECT_EQ(run.train.steps_done, kSilentFrom) << "the silent worker's steps (" << what << ")";
      } else {
        EXPECT_EQ(run.train.steps_done, kSteps)
            << "rank " << comm().rank() << ": a live worker must finish every step under " << what
            << "; it stopped with: " << run.train.error;
      }
    }
  }
}

TEST(Faults, SilentWorkerFailsTheBspStepWithAClearError) {
  LAB09_NEEDS_TWO_RANKS();
  for (int servers : {server_counts().back()}) {  // every server must find it: the most servers
    const RunSpec spec = silent_run(Consistency::kBsp, servers);
    const PsRun run = run_ps(spec);
    const std::string what = "bsp, S = " + std::to_string(servers);
    const std::string rank_text = "(rank " + std::to_string(servers) + ")";
    EXPECT_EQ(run.error, "") << "rank " << comm().rank() << " (" << what << ") threw";
    if (run.server) {
      EXPECT_TRUE(run.report.failed) << "rank " << comm().rank() << ": BSP cannot go on without worker 0 (" << what << ")";
      EXPECT_EQ(run.report.lost, std::vector<int>{0}) << "rank " << comm().rank() << " (" << what << ")";
      EXPECT_NE(run.report.error.find(rank_text), std::string::npos)
          << "rank " << comm().rank() << ": the error must name the lost worker's rank " << rank_text << ": "
          << run.report.error;
    } else if (comm().rank() != servers) {
      // Steps 0 .. kSilentFrom - 1 are complete; step kSilentFrom is computed on version kSilentFrom
      // (the silent worker pushed kSilentFrom - 1), and the pull for step kSilentFrom + 1 fails.
      EXPECT_EQ(run.train.steps_done, kSilentFrom + 1) << "rank " << comm().rank() << " (" << what << ")";
      EXPECT_NE(run.train.error.find(rank_text), std::string::npos)
          << "rank " << comm().rank() << ": the live worker's error must name the lost worker " << rank_text
          << ", got: \"" << run.train.error << "\"";
      EXPECT_NE(run.train.error.find("step " + std::to_string(kSilentFrom)), std::string::npos)
          << "rank " << comm().rank() << ": and the step that cannot complete (" << kSilentFrom << "), got: \""
          << run.train.error << "\"";
    }
  }
}

// ---------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------

TEST(Checkpoint, RestoredServersGoOnAsIfNeverStopped) {
  LAB09_NEEDS_TWO_RANKS();
  constexpr int kFirst = 3, kSecond = 3;
  constexpr std::int64_t kRows = 6;
  for (int servers : server_counts()) {
    RunSpec spec;
    spec.options.servers = servers;
    spec.options.sgd = kSgd;
    spec.options.timeout_seconds = kSafetyTimeout;
    spec.steps = kFirst;
    spec.rows = kRows;
    spec.take_checkpoint = true;
    const PsRun first = run_ps(spec);
    EXPECT_EQ(first.error, "") << "rank " << comm().rank() << ": the first run, S = " << servers;
    // New group, new servers built from the *initial* model, then restored.
    spec.take_checkpoint = false;
    spec.restore = first.server ? &first.checkpoint : nullptr;
    spec.start_clock = kFirst;
    spec.steps = kSecond;
    const PsRun second = run_ps(spec);
    EXPECT_EQ(second.error, "") << "rank " << comm().rank() << ": the restored run, S = " << servers;
    const std::vector<float> oracle = run_oracle(kFirst + kSecond, kRows * (comm().size() - servers), kSgd);
    if (second.server && second.error.empty()) {
      EXPECT_TRUE(close_to(slice(oracle, second.first, second.values.size()), second.values,
                           "server " + std::to_string(comm().rank()) + " after " + std::to_string(kFirst) +
                               " steps, a checkpoint, a restore and " + std::to_string(kSecond) + " more (S = " +
                               std::to_string(servers) + ")",
                           second.first));
      EXPECT_EQ(second.report.version, kFirst + kSecond) << "rank " << comm().rank() << ": the final version";
      EXPECT_TRUE(log_respects_bound(second.events, second.workers, 0, kFirst)) << "the restored run's log";
    }
  }
}

TEST(Checkpoint, ForeignOrDamagedBytesAreRefused) {
  LAB09_NEEDS_TWO_RANKS();
  RunSpec spec;
  spec.options.servers = 1;
  spec.options.sgd = kSgd;
  spec.options.timeout_seconds = kSafetyTimeout;
  spec.steps = 1;
  spec.take_checkpoint = true;
  const PsRun run = run_ps(spec);
  EXPECT_EQ(run.error, "") << "rank " << comm().rank();
  nn::Model model = make_model();
  const std::vector<float> initial = values_of(model);
  // Every rank builds the same groups (collective), servers try the bad restores.
  for (int variant = 0; variant < 3; ++variant) {
    lab09::PsOptions o;
    o.servers = 1;
    o.sgd = variant == 2 ? nn::SgdOptions{.lr = 0.1f, .momentum = 0.0f, .weight_decay = 0.0f} : kSgd;
    o.timeout_seconds = kSafetyTimeout;
    lab09::PsGroup group(comm(), o, key_sizes_of(model), even_bounds(6, 1));
    if (!group.is_server() || run.checkpoint.empty()) continue;
    lab09::ParameterServer server(group, initial);
    std::vector<std::byte> bytes = run.checkpoint;
    std::string what;
    if (variant == 0) {
      bytes.resize(bytes.size() / 2);
      what = "half a checkpoint";
    } else if (variant == 1) {
      bytes.push_back(std::byte{0});
      what = "a checkpoint with a byte too many";
    } else {
      what = "a checkpoint with momentum, into a server without";
    }
    try {
      server.restore(bytes);
      ADD_FAILURE() << "rank " << comm().rank() << ": restore() accepted " << what;
    } catch (const dtl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << what << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << comm().rank() << ": restore() of " << what
                    << " must throw dtl::InvalidArgument naming `bytes`, threw: " << e.what();
    }
  }
}

}  // namespace
}  // namespace lab09_test
