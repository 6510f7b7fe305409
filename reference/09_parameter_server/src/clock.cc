// Lab 09, task B: the vector clock and the consistency models' read rule.
//
// What this file teaches: one integer per worker is all a server needs to
// know how far behind the slowest worker is, and each consistency model is one
// comparison against it. See Note [Vector clock] and Note [Consistency models]
// in lab09/parameter_server.h.
//
//     clocks {3, 5, 4}, all live   min 3
//     worker 1 at clock 5 pulls:   BSP needs version >= 5, SSP(s=2) >= 3, ASP nothing
//     worker 0 lost                min 4 (the lost worker no longer holds anyone back)
#include <algorithm>
#include <string>

#include "harness/error.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

int VectorClock::tick(int worker) {
  DTL_REQUIRE_ARG(worker >= 0 && worker < workers(), "VectorClock::tick", "worker",
                  "is " + std::to_string(worker) + "; it must be in [0, " + std::to_string(workers()) + ")");
  DTL_REQUIRE_ARG(!lost_[static_cast<std::size_t>(worker)], "VectorClock::tick", "worker",
                  std::to_string(worker) + " was lost; a lost worker's clock no longer moves");
  // BEGIN SOLUTION(VectorClock::tick)
  // | Worker `worker` completed one more step: return its new clock (the checks are written
  // | above).
  return ++clocks_[static_cast<std::size_t>(worker)];
  // END SOLUTION
}

void VectorClock::lose(int worker) {
  DTL_REQUIRE_ARG(worker >= 0 && worker < workers(), "VectorClock::lose", "worker",
                  "is " + std::to_string(worker) + "; it must be in [0, " + std::to_string(workers()) + ")");
  // BEGIN SOLUTION(VectorClock::lose)
  // | Mark the worker lost, so that it no longer holds the minimum back; its clock stays as
  // | it was.
  lost_[static_cast<std::size_t>(worker)] = true;
  // END SOLUTION
}

int VectorClock::min() const {
  // BEGIN SOLUTION(VectorClock::min)
  // | Return the smallest clock of a live worker, or the largest clock of all when every
  // | worker is lost, as the header documents (Note [Vector clock]).
  int lowest = -1, highest = 0;
  for (std::size_t w = 0; w < clocks_.size(); ++w) {
    highest = std::max(highest, clocks_[w]);
    if (!lost_[w] && (lowest < 0 || clocks_[w] < lowest)) lowest = clocks_[w];
  }
  return lowest < 0 ? highest : lowest;
  // END SOLUTION
}

bool VectorClock::may_read(Consistency model, int staleness, int clock, int version) {
  // BEGIN SOLUTION(VectorClock::may_read)
  // | Return whether a pull at `clock` may be answered with `version` under `model`, by the
  // | rule the header's may_read() and Note [Consistency models] define for BSP,
  // | SSP(staleness) and ASP.
  switch (model) {
    case Consistency::kBsp: return version >= clock;
    case Consistency::kSsp: return version >= clock - staleness;
    case Consistency::kAsp: return true;
  }
  return false;
  // END SOLUTION
}

}  // namespace dtl::lab09
