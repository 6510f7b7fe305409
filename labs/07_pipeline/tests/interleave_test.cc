// Lab 07, task F: Megatron's interleaved 1F1B. The orders are checked by the
// test's own rules and simulator (interleave_test_util.h), never against
// interleaved_schedule() itself: valid orders, no wait in a cycle, the in-flight
// bound, and the bubble against its closed form. Then the given InterleavedStage
// runs them, and the result must equal one process on the whole batch.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "labs/07_pipeline/tests/interleave_test_util.h"

namespace lab07_test {
namespace {

std::vector<std::vector<Action>> all_ranks(int P, int m, int v) {
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < P; ++s) orders.push_back(lab07::interleaved_schedule(P, s, m, v));
  return orders;
}

std::string where(int P, int v, int m) {
  return "P = " + std::to_string(P) + ", v = " + std::to_string(v) + ", m = " + std::to_string(m);
}

// The worked example of interleave.cc and the handout, by hand from Note [Interleaving].
TEST(Interleaved, WorkedExample) {
  EXPECT_EQ(chunk_text(lab07::interleaved_schedule(2, 0, 4, 2)),
            "F0[0] F1[0] F0[1] F1[1] F2[0] B0[1] F3[0] B1[1] F2[1] B0[0] F3[1] B1[0] B2[1] B3[1] B2[0] B3[0]");
  EXPECT_EQ(chunk_text(lab07::interleaved_schedule(2, 1, 4, 2)),
            "F0[0] F1[0] F0[1] B0[1] F1[1] B1[1] F2[0] B0[0] F3[0] B1[0] F2[1] B2[1] F3[1] B3[1] B2[0] B3[0]");
}

// One chunk is 1F1B (the test's greedy 1F1B), for every m.
TEST(Interleaved, OneChunkIsOneFOneB) {
  for (int P = 1; P <= 5; ++P) {
    for (int s = 0; s < P; ++s) {
      for (int m = 1; m <= 9; ++m) {
        EXPECT_EQ(chunk_text(lab07::interleaved_schedule(P, s, m, 1)), chunk_text(one_f_one_b_order(P, s, m)))
            << "rank " << s << ", " << where(P, 1, m);
      }
    }
  }
}

// Each rank's list is a valid order; all ranks together never wait in a cycle;
// each rank holds at most Megatron's warm-up + 1 pairs, and exactly that many
// once the warm-up is followed by a steady phase.
TEST(Interleaved, ValidOrdersWithoutDeadlockAndTheInFlightBound) {
  for (int P = 1; P <= 5; ++P) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = P; m <= 4 * P; m += P) {
        const auto orders = all_ranks(P, m, v);
        bool valid = true;
        for (int s = 0; s < P; ++s) {
          const std::vector<Action>& order = orders[static_cast<std::size_t>(s)];
          const std::string why = check_order(order, v, m);
          EXPECT_EQ(why, "") << "rank " << s << ", " << where(P, v, m) << ": " << chunk_text(order);
          valid = valid && why.empty() && order.size() == 2u * static_cast<std::size_t>(v * m);
          // Megatron's bound (v > 1); with one chunk, 1F1B's (the test's greedy order).
          const int bound = v == 1 ? peak_in_flight(one_f_one_b_order(P, s, m)) : (v - 1) * P + 2 * (P - 1 - s) + 1;
          EXPECT_EQ(peak_in_flight(order), std::min(v * m, bound))
              << "rank " << s << ", " << where(P, v, m) << ": " << chunk_text(order);
        }
        if (!valid) continue;
        EXPECT_EQ(simulate(orders, v, m, 1.0, 2.0).deadlock, "") << where(P, v, m);
      }
    }
  }
}

// Note [Interleaving]: with chunk ops of t_f and t_b (a rank's whole forward of
// a micro-batch is v t_f), every rank idles (P - 1)(t_f + t_b) chunk-times:
// (P - 1)(v t_f + v t_b)/v in a rank's terms, against 1F1B's (P - 1)(v t_f + v t_b).
// The makespan is therefore (v m + P - 1)(t_f + t_b) and the bubble
// (P - 1)/(v m + P - 1). Unit-time ops (t_f = t_b = 1), and t_b = 2 t_f.
TEST(Interleaved, BubbleShrinksByTheChunkCount) {
  for (const auto& [t_f, t_b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
    for (int P = 1; P <= 5; ++P) {
      for (int v = 1; v <= 4; ++v) {
        for (int m = P; m <= 4 * P; m += P) {
          const std::string what = where(P, v, m) + ", t_b = " + std::to_string(t_b);
          const Simulation sim = simulate(all_ranks(P, m, v), v, m, t_f, t_b);
          ASSERT_EQ(sim.deadlock, "") << what;
          EXPECT_EQ(sim.makespan, (v * m + P - 1) * (t_f + t_b)) << what;
          for (int s = 0; s < P; ++s) {
            EXPECT_EQ(sim.makespan - sim.busy[static_cast<std::size_t>(s)], (P - 1) * (t_f + t_b))
                << "rank " << s << ", " << what;
          }
          EXPECT_NEAR((sim.makespan - sim.busy[0]) / sim.makespan,
                      static_cast<double>(P - 1) / static_cast<double>(v * m + P - 1), 1e-12)
              << what;
        }
      }
    }
  }
}

TEST(Interleaved, BadArgumentsAreNamed) {
  expect_invalid([] { lab07::interleaved_schedule(2, 0, 3, 2); }, "micro_batches");  // not a multiple of P
  expect_invalid([] { lab07::interleaved_schedule(4, 1, 6, 3); }, "micro_batches");
  expect_invalid([] { lab07::interleaved_schedule(2, 0, 4, 0); }, "chunks");
  expect_invalid([] { lab07::interleaved_schedule(2, 2, 4, 2); }, "stage");
  expect_invalid([] { lab07::interleaved_schedule(0, 0, 4, 2); }, "stages");
  expect_invalid([] { lab07::interleaved_schedule(1, 0, 0, 2); }, "micro_batches");
}

// ---------------------------------------------------------------------------
// Run by InterleavedStage: the same result as one process
// ---------------------------------------------------------------------------

constexpr std::int64_t kRows = 12;  // m = 8 does not divide it: uneven micro-batches
constexpr int kSteps = 2;

void expect_equivalent(ModelKind kind, int v, int m) {
  const int P = comm().size();
  const int units = std::max(5, v * P);
  const InterleavedRun run = run_interleaved(kind, v, m, kSteps, kRows, units);
  const Oracle oracle = run_oracle(kind, 3, kSteps, kRows, units);
  const std::string what = std::string(model_name(kind)) + ", " + where(P, v, m);
  for (int c = 0; c < v; ++c) {
    const auto [begin, end] = run.units[static_cast<std::size_t>(c)];
    EXPECT_TRUE(close_to(unit_values(oracle.model, begin, end), run.values[static_cast<std::size_t>(c)],
                         "rank " + std::to_string(comm().rank()) + " chunk " + std::to_string(c) +
                             "'s parameters after " + std::to_string(kSteps) + " steps (" + what + ")"));
  }
  if (comm().rank() == P - 1) {
    for (int step = 0; step < kSteps; ++step) {
      const double want = oracle.losses[static_cast<std::size_t>(step)];
      EXPECT_NEAR(run.losses[static_cast<std::size_t>(step)], want, 1e-5 * (1.0 + want))
          << "the loss of step " << step << " (" << what << ")";
    }
  }
  // Point-to-point messages: 2 (v P - 1) per micro-batch over all ranks, one per
  // edge between consecutive virtual stages and direction.
  long long sent = run.messages, total = 0;
  MPI_Allreduce(&sent, &total, 1, MPI_LONG_LONG, MPI_SUM, comm());
  EXPECT_EQ(total, 2LL * (v * P - 1) * m) << what;
}

TEST(InterleavedRun, TwoChunksEqualOneProcess) {
  const int P = comm().size();
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    for (int m : {P, 2 * P, 3 * P}) {
      if (m <= kRows) expect_equivalent(kind, 2, m);
    }
  }
}

TEST(InterleavedRun, ThreeChunksEqualOneProcess) {
  const int P = comm().size();
  for (int m : {P, 2 * P}) expect_equivalent(ModelKind::kMlp, 3, m);
  expect_equivalent(ModelKind::kGpt, 3, P);
}

}  // namespace
}  // namespace lab07_test
