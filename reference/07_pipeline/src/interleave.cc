// Lab 07, task F: Megatron's interleaved 1F1B (virtual stages).
//
// What this file teaches: interleaving changes nothing in how a pipeline is
// run, only in what each rank's list says. Each op now names its chunk, and the
// list decides the bubble: with v chunks per rank the fill and drain are made of
// ops 1/v the size, so the bubble shrinks by v. See Note [Interleaving] in
// lab07/pipeline.h; the given InterleavedStage runs the list.
//
// P = 2, v = 2, m = 4 (chunk in brackets; rank 0 holds virtual stages 0 and 2,
// rank 1 holds 1 and 3). Forwards go in groups of P micro-batches through
// chunk 0, then the same group through chunk 1; backwards the chunks reversed.
//
//   rank 0: F0[0] F1[0] F0[1] F1[1] F2[0] B0[1] F3[0] B1[1] F2[1] B0[0] F3[1] B1[0] B2[1] B3[1] B2[0] B3[0]
//   rank 1: F0[0] F1[0] F0[1] B0[1] F1[1] B1[1] F2[0] B0[0] F3[0] B1[0] F2[1] B2[1] F3[1] B3[1] B2[0] B3[0]
//
//   (rank 0: warm-up 2 (P - 1) + (v - 1) P = 4; rank 1: 2.)
#include <algorithm>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab07/interleave.h"
#include "schedule_checks.h"

namespace dtl::lab07 {

std::vector<Action> interleaved_schedule(int stages, int stage, int micro_batches, int chunks) {
  check_schedule_args("interleaved_schedule", stages, stage, micro_batches);
  DTL_REQUIRE_ARG(chunks >= 1 && static_cast<long long>(chunks) * micro_batches <= kMaxMicroBatches,
                  "interleaved_schedule", "chunks",
                  "is " + std::to_string(chunks) + "; it must be at least 1, with chunks * micro_batches <= " +
                      std::to_string(kMaxMicroBatches));
  DTL_REQUIRE_ARG(chunks == 1 || micro_batches % stages == 0, "interleaved_schedule", "micro_batches",
                  "is " + std::to_string(micro_batches) + "; with " + std::to_string(chunks) +
                      " chunks it must be a multiple of stages = " + std::to_string(stages) +
                      " (Note [Interleaving])");
  const int total = chunks * micro_batches;
  std::vector<Action> schedule;
  schedule.reserve(2 * static_cast<std::size_t>(total));
  // BEGIN SOLUTION(interleaved_schedule)
  // | Fill `schedule` (returned below) with this rank's 2 v m actions of Megatron's
  // | interleaved 1F1B as Note [Interleaving] defines them (handout Task F): which chunk and
  // | micro-batch the k-th forward and the k-th backward are, the warm-up length, then the
  // | alternation and the cool-down. The argument checks are written above. Interleaved.*
  // | checks the result with its own simulator (dependencies, in-flight bound, bubble).
  // The k-th forward (backward) of this rank: groups of P micro-batches, each group
  // through every chunk in turn (backwards: the last chunk first).
  const auto op = [&](Pass pass, int k) {
    const int group = k / (stages * chunks);
    const int chunk_in_order = (k / stages) % chunks;
    const int chunk = pass == Pass::kForward ? chunk_in_order : chunks - 1 - chunk_in_order;
    // With one chunk this is 1F1B, where m need not be a multiple of P: k itself.
    const int micro_batch = chunks == 1 ? k : group * stages + k % stages;
    return Action{pass, micro_batch, chunk};
  };
  // Warm-up: rank s must run its forwards until the first backward of the last
  // virtual stage can come back to it: 2 (P - s - 1) ops to reach rank P - 1 and
  // return, plus (v - 1) P forwards of the earlier chunks in between (Megatron's).
  // One chunk is plain 1F1B, whose warm-up is P - s - 1.
  const int ahead = stages - stage - 1;  // the ranks after this one
  const int warm_up = std::min(total, chunks == 1 ? ahead : 2 * ahead + (chunks - 1) * stages);
  for (int k = 0; k < warm_up; ++k) schedule.push_back(op(Pass::kForward, k));
  for (int j = 0; j < total - warm_up; ++j) {
    schedule.push_back(op(Pass::kForward, warm_up + j));
    schedule.push_back(op(Pass::kBackward, j));
  }
  for (int k = total - warm_up; k < total; ++k) schedule.push_back(op(Pass::kBackward, k));
  // END SOLUTION
  return schedule;
}

}  // namespace dtl::lab07
