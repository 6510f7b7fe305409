// Lab 07, given (not a task): the argument checks of the schedules (src/schedule.cc).
#pragma once

#include <string>

#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

/// @throws dtl::InvalidArgument naming `function` unless stages >= 1, 0 <= stage < stages
/// and 1 <= micro_batches <= kMaxMicroBatches.
inline void check_schedule_args(const char* function, int stages, int stage, int micro_batches) {
  DTL_REQUIRE_ARG(stages >= 1, function, "stages", "must be at least 1, not " + std::to_string(stages));
  DTL_REQUIRE_ARG(stage >= 0 && stage < stages, function, "stage",
                  "is " + std::to_string(stage) + "; it must be in [0, " + std::to_string(stages) + ")");
  DTL_REQUIRE_ARG(micro_batches >= 1 && micro_batches <= kMaxMicroBatches, function, "micro_batches",
                  "is " + std::to_string(micro_batches) + "; it must be in [1, " + std::to_string(kMaxMicroBatches) +
                      "]");
}

}  // namespace dtl::lab07
