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
#include "schedule_checks.h"

namespace dtl::lab07 {
std::vector<Action> gpipe_schedule(int stages, int stage, int micro_batches) {
  check_schedule_args("gpipe_schedule", stages, stage, micro_batches);
  std::vector<Action> schedule;
  schedule.reserve(2 * static_cast<std::size_t>(micro_batches));
  // BEGIN SOLUTION(gpipe_schedule)
  // | Fill `schedule` (returned below) with GPipe's 2m actions for this stage, as Note [GPipe
  // | and 1F1B] defines the order (handout Task B). The argument checks are written above.
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
  // | Fill `schedule` (returned below) with 1F1B's 2m actions for stage s of P with m
  // | micro-batches (Note [GPipe and 1F1B], handout Task B): forwards in order F0 .. F(m-1),
  // | backwards in order B0 .. B(m-1), each micro-batch's F before its B; after a warm-up of
  // | forwards the stage strictly alternates one forward and one backward until the forwards
  // | run out, then runs the remaining backwards. The warm-up is the shortest one that keeps
  // | this stage from waiting on the stages after it in the steady state (balanced stages),
  // | and never more than m forwards: work out how long that is. Schedules.* checks the order
  // | against an independent rule; the worked example P = 3, m = 4 in the handout must come
  // | out.
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
