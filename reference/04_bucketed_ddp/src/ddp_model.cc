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
  // BEGIN SOLUTION(check_model_agreement)
  // | Return when every rank holds the same parameter count and, for each i, the same name
  // | and numel; otherwise throw dtl::InvalidArgument on EVERY rank, naming the first rank
  // | that differs from rank 0 and the first differing parameter (index, this rank's name,
  // | the element counts) or the two counts. Every collective here must have a size every
  // | rank knows before it starts, so that a mismatch can never hang (Note [A check that
  // | cannot hang] above; handout Task A). hash_name() is given.
  double model_hash = 0.0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    // Order-sensitive mixing, reduced modulo a prime below 2^52. The products may
    // round (they exceed 2^53), but identically on every rank: the same doubles,
    // the same operations.
    const double mixed = hash_name(params[i]->name) + static_cast<double>(params[i]->value.numel()) * 7919.0;
    model_hash = std::fmod(model_hash * 31.0 + mixed, 4503599627370449.0);
  }
  const std::vector<double> mine = {static_cast<double>(params.size()), model_hash};
  std::vector<double> all(2 * static_cast<std::size_t>(size));
  backend.allgather_blocking<double>(mine, all);
  bool same = true;
  std::size_t min_count = params.size();
  for (int r = 0; r < size; ++r) {
    same = same && all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    min_count = std::min(min_count, static_cast<std::size_t>(all[2 * r]));
  }
  if (same) return;

  std::vector<double> detail(2 * min_count);
  for (std::size_t i = 0; i < min_count; ++i) {
    detail[2 * i] = static_cast<double>(params[i]->value.numel());
    detail[2 * i + 1] = hash_name(params[i]->name);
  }
  std::vector<double> every(detail.size() * static_cast<std::size_t>(size));
  backend.allgather_blocking<double>(detail, every);
  std::ostringstream why;
  for (int r = 1; r < size; ++r) {
    const double* theirs = every.data() + 2 * min_count * static_cast<std::size_t>(r);
    for (std::size_t i = 0; i < min_count; ++i) {
      if (theirs[2 * i] != every[2 * i] || theirs[2 * i + 1] != every[2 * i + 1]) {
        why << "ranks disagree on the model: rank " << r << " differs from rank 0 at parameter " << i
            << " (here on rank " << backend.rank() << " it is '" << params[i]->name << "', "
            << params[i]->value.numel() << " elements; rank 0 has " << every[2 * i] << " elements, rank " << r
            << " has " << theirs[2 * i] << " elements"
            << (theirs[2 * i + 1] != every[2 * i + 1] ? ", and a different name" : "") << ")";
        throw InvalidArgument(why.str());
      }
    }
    if (all[2 * r] != all[0]) {
      why << "ranks disagree on the model: rank " << r << " has " << all[2 * r] << " parameters, rank 0 has "
          << all[0] << " (the first " << min_count << " agree; this rank, " << backend.rank() << ", has "
          << params.size() << ")";
      throw InvalidArgument(why.str());
    }
  }
  why << "ranks disagree on the model (the model hashes differ, but no parameter was found that differs)";
  throw InvalidArgument(why.str());
  // END SOLUTION
}

void broadcast_parameters(Communicator& backend, nn::Model& model, int root) {
  if (root < 0 || root >= backend.world_size()) {
    throw InvalidArgument("broadcast_parameters: root " + std::to_string(root) + " is not a rank of a world of " +
                          std::to_string(backend.world_size()));
  }
  // BEGIN SOLUTION(broadcast_parameters)
  // | On return every rank's parameter values equal rank `root`'s, bit for bit; the models
  // | are checked to agree first (check_model_agreement()). A flattened model
  // | (model.flat_values().defined()) is one buffer; the broadcasts may all be in flight at
  // | once, and all have finished on return. The values may live on a GPU, where span()
  // | throws (handout Task A, and "On a GPU: streams and events").
  check_model_agreement(backend, model);
  std::vector<Work> pending;
  const auto broadcast = [&](const nn::Tensor& values) {
    pending.push_back(
        backend.broadcast(values.data<float>(), static_cast<std::size_t>(values.numel()), DType::kF32, root));
  };
  const nn::Tensor& flat = model.flat_values();
  if (flat.defined()) {
    broadcast(flat);
  } else {
    for (nn::Parameter* p : model.parameters()) broadcast(p->value);
  }
  for (Work& w : pending) w.wait();
  // END SOLUTION
}

}  // namespace dtl::lab04
