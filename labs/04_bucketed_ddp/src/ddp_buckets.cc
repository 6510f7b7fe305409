// Lab 04, task B: gradient buckets in reverse parameter order, with a byte cap.
//
// What this file teaches: the one decision DDP makes before training starts —
// which gradients travel together. It is a pure function of the parameter
// sizes and two caps, so it is easy to reason about and to test.
//
// Note [Bucket order]
// -------------------
// Backward visits the layers last to first, so the gradients become final in
// *reverse* parameter order: the head's first, the first layer's last (the hook
// grad_ready fires in that order, see harness/nn/model.h). A bucket can only
// start its allreduce when all of its gradients are final. Filling buckets in
// reverse order makes bucket 0 (the head's gradients) complete first, after only
// the first piece of backward; its allreduce then runs while backward computes
// the layers below, bucket 1 follows, and so on. Buckets filled in forward order
// would put the first layer in bucket 0, which completes only at the very end of
// backward, and nothing would overlap. The buckets are also *issued* in this
// order on every rank, whatever order they fill in:
// see Note [Issue in bucket order] in ddp_reducer.cc.
//
// Note [Why a cap]
// ----------------
// A ring allreduce of n bytes over P ranks costs, in the alpha-beta model
// (alpha per message, B bytes per second),
//
//     T(n) = 2(P-1) alpha + 2(P-1)/P * n / B
//
// With N bytes of gradients in all, what is left to wait for once backward ends
// ("all bytes": the 2(P-1)/P * N / B of the whole gradient):
//
//     strategy                    allreduces    exposed after backward
//     naive (one per parameter)   #params       #params * 2(P-1) alpha + all bytes
//     buckets, after backward     ceil(N/cap)   ceil(N/cap) * 2(P-1) alpha + all bytes
//     one bucket of everything    1             all of T(N): it starts when backward ends
//     buckets, during backward    ceil(N/cap)   about T(last bucket), if the link keeps up
//
// Per-parameter allreduces pay alpha once per parameter tensor (about 150 in
// GPT-2 small); one allreduce of everything pays it once but cannot start
// before backward is over. A cap trades the two: alpha per bucket, and all but
// the last bucket's transfer hidden behind backward. The last bucket issued (the
// first layers') fills when backward ends, so it is never hidden: the smaller
// the cap, the less is left exposed at the end, and the more alphas are paid.
// PyTorch's default is 25 MiB (kDefaultBucketCapBytes).
//
// A parameter is never split across buckets, even one larger than the cap (it
// gets a bucket of its own): a bucket is complete exactly when its parameters
// are, and a split parameter would belong to two buckets at once.
//
// Note [The small first bucket]
// -----------------------------
// Nothing can be sent before the first bucket is full. With a 25 MiB cap the
// link would idle until 25 MiB of gradients exist; a small first bucket (1 MiB,
// PyTorch's _DEFAULT_FIRST_BUCKET_BYTES, kDefaultFirstBucketCapBytes here) puts
// the link to work after the last layer or two, and costs only one extra alpha.
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
  // TODO(student): Fill `buckets` (returned below) exactly as the header's rules and worked example in
  //   lab04/ddp.h define them (reverse parameter order, first cap then cap, a parameter above
  //   the cap alone, a bucket that reaches its cap closed at once, zero-byte parameters in
  //   the current bucket); empty input gives no buckets. The cap checks are written above
  //   (handout Task B, section (c)).
  throw dtl::NotImplemented("assign_buckets");
  return buckets;
}

}  // namespace dtl::lab04
