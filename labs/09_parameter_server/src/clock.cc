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
  // TODO(student): Worker `worker` completed one more step: return its new clock (the checks are written
  //   above).
  throw dtl::NotImplemented("VectorClock::tick");
}

void VectorClock::lose(int worker) {
  DTL_REQUIRE_ARG(worker >= 0 && worker < workers(), "VectorClock::lose", "worker",
                  "is " + std::to_string(worker) + "; it must be in [0, " + std::to_string(workers()) + ")");
  // TODO(student): Mark the worker lost, so that it no longer holds the minimum back; its clock stays as
  //   it was.
  throw dtl::NotImplemented("VectorClock::lose");
}

int VectorClock::min() const {
  // TODO(student): Return the smallest clock of a live worker, or the largest clock of all when every
  //   worker is lost, as the header documents (Note [Vector clock]).
  throw dtl::NotImplemented("VectorClock::min");
}

bool VectorClock::may_read(Consistency model, int staleness, int clock, int version) {
  // TODO(student): Return whether a pull at `clock` may be answered with `version` under `model`, by the
  //   rule the header's may_read() and Note [Consistency models] define for BSP,
  //   SSP(staleness) and ASP.
  throw dtl::NotImplemented("VectorClock::may_read");
}

}  // namespace dtl::lab09
