// Lab 04, task A: every rank starts from the same model.
//
// What this file teaches: data parallelism is only correct if every rank takes
// the same optimizer step from the same parameters. Building the model with the
// same seed everywhere usually gives the same numbers, but "usually" is not a
// guarantee (a rank with a different config, a different library version), so
// DDP broadcasts rank 0's parameters at the start — and first checks that the
// ranks agree on the *shape* of the model, because a broadcast of mismatched
// sizes would not fail cleanly: it would hang or corrupt memory.
//
// Note [A check that cannot hang]
// -------------------------------
// The check must not hang either, so each of its collectives has a size every
// rank knows before it starts:
//   1. allgather 2 numbers per rank: the parameter count and a hash of the
//      whole model (names and sizes). If all equal, done.
//   2. otherwise, allgather per-parameter (numel, name hash) for the first m
//      parameters, m = the smallest count (known from step 1 on every rank),
//      find the first rank and parameter that differ from rank 0, and throw the
//      same error on every rank.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab04/ddp.h"
#include "model_helpers.h"

namespace dtl::lab04 {
void check_model_agreement(Communicator& backend, const nn::Model& model) {
  const std::vector<nn::Parameter*> params = model.parameters();
  const int size = backend.world_size();
  // TODO(student): Return when every rank holds the same parameter count and, for each i, the same name
  //   and numel; otherwise throw dtl::InvalidArgument on EVERY rank, naming the first rank
  //   that differs from rank 0 and the first differing parameter (index, this rank's name,
  //   the element counts) or the two counts. Every collective here must have a size every
  //   rank knows before it starts, so that a mismatch can never hang (Note [A check that
  //   cannot hang] above; handout Task A). hash_name() is given.
  throw dtl::NotImplemented("check_model_agreement");
}

void broadcast_parameters(Communicator& backend, nn::Model& model, int root) {
  if (root < 0 || root >= backend.world_size()) {
    throw InvalidArgument("broadcast_parameters: root " + std::to_string(root) + " is not a rank of a world of " +
                          std::to_string(backend.world_size()));
  }
  // TODO(student): On return every rank's parameter values equal rank `root`'s, bit for bit; the models
  //   are checked to agree first (check_model_agreement()). A flattened model
  //   (model.flat_values().defined()) is one buffer; the broadcasts may all be in flight at
  //   once, and all have finished on return. The values may live on a GPU, where span()
  //   throws (handout Task A, and "On a GPU: streams and events").
  throw dtl::NotImplemented("broadcast_parameters");
}

}  // namespace dtl::lab04
