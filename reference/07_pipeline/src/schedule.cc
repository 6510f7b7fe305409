// Lab 07, task B: the order of work on one stage, GPipe and 1F1B.
//
// What this file teaches: a pipeline schedule is nothing but a list per stage of
// "forward of micro-batch i" and "backward of micro-batch i". The executor
// (stage.cc) runs whatever list it is given; the list alone decides the bubble
// and the activation memory. See Note [GPipe and 1F1B] in lab07/pipeline.h.
//
// P = 4 stages, m = 6 micro-batches, time going right (one column per slot of
// work; '.' is idle: the bubble):
//
//   GPipe
//     stage 0:  F0 F1 F2 F3 F4 F5  .  .  .  .  .  . B0 B1 B2 B3 B4 B5   (holds 6)
//     stage 3:   .  .  . F0 F1 F2 F3 F4 F5 B0 B1 B2 B3 B4 B5            (holds 6)
//   1F1B
//     stage 0:  F0 F1 F2 F3  .  .  . B0 F4 B1 F5 B2 B3 B4 B5            (holds 4)
//     stage 3:   .  .  . F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5            (holds 1)
//
// (the columns are idealised: a backward costs about twice a forward.)
#include <algorithm>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {
namespace {

void check_schedule_args(const char* function, int stages, int stage, int micro_batches) {
  DTL_REQUIRE_ARG(stages >= 1, function, "stages", "must be at least 1, not " + std::to_string(stages));
  DTL_REQUIRE_ARG(stage >= 0 && stage < stages, function, "stage",
                  "is " + std::to_string(stage) + "; it must be in [0, " + std::to_string(stages) + ")");
  DTL_REQUIRE_ARG(micro_batches >= 1 && micro_batches <= kMaxMicroBatches, function, "micro_batches",
                  "is " + std::to_string(micro_batches) + "; it must be in [1, " + std::to_string(kMaxMicroBatches) +
                      "]");
}

}  // namespace

std::vector<Action> gpipe_schedule(int stages, int stage, int micro_batches) {
  check_schedule_args("gpipe_schedule", stages, stage, micro_batches);
  std::vector<Action> schedule;
  schedule.reserve(2 * static_cast<std::size_t>(micro_batches));
  // BEGIN SOLUTION(gpipe_schedule)
  // | Every forward, F0 .. F(m-1), then every backward, B0 .. B(m-1). The stage does
  // | not matter: each stage runs the same order, shifted in time by the pipeline.
  for (int i = 0; i < micro_batches; ++i) schedule.push_back({Pass::kForward, i});
  for (int i = 0; i < micro_batches; ++i) schedule.push_back({Pass::kBackward, i});
  // END SOLUTION
  return schedule;
}

std::vector<Action> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  check_schedule_args("one_f_one_b_schedule", stages, stage, micro_batches);
  std::vector<Action> schedule;
  schedule.reserve(2 * static_cast<std::size_t>(micro_batches));
  // BEGIN SOLUTION(one_f_one_b_schedule)
  // | Warm-up: w = min(P - s - 1, m) forwards F0 .. F(w-1), enough to fill the stages
  // | after this one. Steady state: F(w + j) then B(j), for j = 0 .. m - w - 1.
  // | Cool-down: the backwards that are left, B(m - w) .. B(m - 1).
  const int warm_up = std::min(stages - stage - 1, micro_batches);
  for (int i = 0; i < warm_up; ++i) schedule.push_back({Pass::kForward, i});
  for (int j = 0; j < micro_batches - warm_up; ++j) {
    schedule.push_back({Pass::kForward, warm_up + j});
    schedule.push_back({Pass::kBackward, j});
  }
  for (int i = micro_batches - warm_up; i < micro_batches; ++i) schedule.push_back({Pass::kBackward, i});
  // END SOLUTION
  return schedule;
}

}  // namespace dtl::lab07
