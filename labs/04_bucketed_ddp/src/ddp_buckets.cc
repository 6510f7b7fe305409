// Lab 04, task B: gradient buckets in reverse parameter order, with a byte cap.
//
// What this file teaches: the one decision DDP makes before training starts —
// which gradients travel together. It is a pure function of the parameter
// sizes and two caps, so it is easy to reason about and to test.
//
// Note [Bucket order]
// -------------------
// Backward visits the layers last to first, so the gradients become final in
// *reverse* parameter order: the head's first, the embedding's last (the hook
// grad_ready fires in that order, see harness/nn/model.h). A bucket can only
// start its allreduce when all of its gradients are final. Filling buckets in
// reverse order makes bucket 0 complete first, after only the last layer's
// backward, bucket 1 next, and so on: each allreduce can start while backward
// still computes the earlier layers. Buckets in forward order would all complete
// at the very end of backward, and nothing would overlap.
//
// Note [Why a cap]
// ----------------
// One allreduce costs about alpha + n/B (alpha-beta model). Per-parameter
// allreduces pay alpha once per parameter (hundreds of times for a GPT); one
// allreduce of everything pays it once but can only start when backward is over.
// A cap between the two trades them: alpha per bucket, and all but the last
// bucket's transfer hidden behind backward. The last bucket to be issued (the
// first layers') is never hidden; the smaller the cap, the less is left exposed
// at the end, and the more alphas are paid. PyTorch's default is 25 MiB.
//
// Note [The small first bucket]
// -----------------------------
// Nothing can be sent before the first bucket is full. With a 25 MiB cap the
// link would idle until 25 MiB of gradients exist; a small first bucket (1 MiB
// in PyTorch) puts the link to work after the last layer or two, and costs only
// one extra alpha.
#include <cstddef>
#include <span>
#include <vector>

#include "harness/error.h"
#include "lab04/ddp.h"

namespace dtl::lab04 {

std::vector<std::vector<int>> assign_buckets(std::span<const std::size_t> param_bytes, std::size_t cap_bytes,
                                             std::size_t first_cap_bytes) {
  if (cap_bytes == 0) throw InvalidArgument("assign_buckets: cap_bytes must be > 0");
  if (first_cap_bytes == 0) throw InvalidArgument("assign_buckets: first_cap_bytes must be > 0");
  std::vector<std::vector<int>> buckets;
  // TODO(student): Walk i from the last parameter down to 0 (See Note [Bucket order]), keeping
  //   the current bucket and its bytes. The cap is first_cap_bytes while you fill
  //   bucket 0, cap_bytes after. If the current bucket is not empty and adding
  //   param_bytes[i] would exceed the cap, push it and start a new one; add i.
  //   A bucket whose bytes reach the cap exactly is closed too. Push the last one.
  throw dtl::NotImplemented("assign_buckets");
  return buckets;
}

}  // namespace dtl::lab04
