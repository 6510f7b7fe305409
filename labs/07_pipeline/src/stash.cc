// Lab 07, task D: weight stashing for PipeDream's asynchronous 1F1B.
//
// What this file teaches: without a flush, weights change between a
// micro-batch's forward and its backward. A correct gradient needs the backward
// to see the weights the forward saw; keeping a copy per micro-batch in flight
// is the price. See Note [Weight stashing] in lab07/pipeline.h.
//
// Stage 0 of P = 3 (w = 2 warm-up forwards), versions in brackets:
//
//     F0[0] F1[0] F2[0] B0 ->v1  F3[1] B1 ->v2  F4[2] B2 ->v3 ...
//
// B1 runs after the update of B0 (weights v1) but F1 used v0: begin_backward(1)
// puts v0 back for it, end_backward(1) restores v1, and the caller's update
// makes v2. At most 3 copies (F0, F1, F2) are held at once: P - s.
#include <algorithm>
#include <cstring>
#include <string>

#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

void WeightStash::save(int micro_batch, int version) {
  DTL_REQUIRE_ARG(micro_batch >= 0, "WeightStash::save", "micro_batch", "is negative");
  if (static_cast<std::size_t>(micro_batch) >= copies_.size()) {
    copies_.resize(static_cast<std::size_t>(micro_batch) + 1);
    versions_.resize(static_cast<std::size_t>(micro_batch) + 1, 0);
  }
  DTL_REQUIRE_ARG(!copies_[static_cast<std::size_t>(micro_batch)].defined(), "WeightStash::save", "micro_batch",
                  std::to_string(micro_batch) + " already has a stashed copy (a second forward before its backward?)");
  // TODO(student): Keep a copy of the weights as they are now (MemoryCategory::kParameters) and the
  //   current version for micro_batch, and keep the count and the peak count of stashed
  //   copies up to date (Note [Weight stashing], handout Task D).
  throw dtl::NotImplemented("WeightStash::save");
}

int WeightStash::begin_backward(int micro_batch) {
  DTL_REQUIRE_ARG(micro_batch >= 0 && static_cast<std::size_t>(micro_batch) < copies_.size() &&
                      copies_[static_cast<std::size_t>(micro_batch)].defined(),
                  "WeightStash::begin_backward", "micro_batch",
                  std::to_string(micro_batch) + " has no stashed copy (save() it at its forward)");
  DTL_REQUIRE_ARG(in_backward_ < 0, "WeightStash::begin_backward", "micro_batch",
                  "the backward of micro-batch " + std::to_string(in_backward_) + " has not ended");
  // TODO(student): Until end_backward(micro_batch), the model computes with micro_batch's stashed weights
  //   (the weights tensor itself must hold them: the model reads that storage), the newest
  //   weights are kept aside, and the stashed version is returned (Note [Weight stashing]).
  throw dtl::NotImplemented("WeightStash::begin_backward");
}

void WeightStash::end_backward(int micro_batch) {
  DTL_REQUIRE_ARG(micro_batch == in_backward_ && micro_batch >= 0, "WeightStash::end_backward", "micro_batch",
                  "is " + std::to_string(micro_batch) + ", but the backward that began is " +
                      (in_backward_ < 0 ? std::string("none") : std::to_string(in_backward_)));
  // TODO(student): Put the newest weights back into the weights tensor and free both the aside copy and
  //   micro_batch's stashed copy, counting it down (Note [Weight stashing]).
  throw dtl::NotImplemented("WeightStash::end_backward");
}

}  // namespace dtl::lab07
