// Lab 03, task D: the reduce-copy, one thread's share — dst = a + b, 16 bytes at a time.
//
// What this file teaches: how a memory-bound GPU kernel is written so that it
// runs at the speed of memory. A reduce-copy does almost no arithmetic (one add
// per element); its time is the bytes it reads and writes divided by the memory
// bandwidth. Three things get it there:
//
//   1. 16-byte vector loads and stores (one LDG.128 instead of four LDG.32):
//      fewer instructions, fewer memory transactions in flight to track;
//   2. a grid-stride loop: a fixed number of threads (enough to fill the GPU)
//      walks the whole array, thread t taking vectors t, t + T, t + 2T, ... so
//      that at every moment the 32 threads of a warp touch 32 consecutive
//      vectors (512 contiguous bytes: coalesced);
//   3. a scalar head and tail: a vector load needs a 16-byte aligned address.
//      Elements before the first aligned address (the head) and after the last
//      whole vector (the tail) go one at a time:
//
//        element    0   1   2 | 3   4   5   6 | 7   8   9  10 | 11  12
//        address  ..4  ..8 ..c|..0 ..4 ..8 ..c|..0 ..4 ..8 ..c|..0 ..4     (floats)
//                 <-- head -->|<-- vector 0 ->|<-- vector 1 ->|<-tail->
//
//      Vectors are only possible when dst, a, b (and dst2) share one offset
//      within 16 bytes; otherwise every element goes the scalar way (correct,
//      slower; the ring's buffers all come from cudaMalloc, 256-byte aligned,
//      and chunks start at the same element offset in each, so this is rare).
//
// Half-precision types are added in fp32: convert, add, round once.
//
// The function is __host__ __device__ (DTL_HOST_DEVICE): the kernel in
// reduce_copy.cu calls it with its thread index, and the CPU tests call it for
// every thread index in turn on host memory. That is the whole point of writing
// it this way: the index arithmetic (head, vectors, tail, stride) — where the
// bugs are — is tested without a GPU.
//
// Left out: unrolling several vectors per iteration (more loads in flight per
// thread; worth a few percent on some GPUs), non-temporal (streaming) stores,
// and LL/LL128-style flag words (see the handout's NCCL section).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lab03/ring_cuda.h"
#include "reduce_copy_pack.cuh"  // given: to_float/from_float, Pack<T>, load_pack/store_pack, reduce_copy_one

namespace dtl::lab03::detail {

// ---------------------------------------------------------------------------
// One thread's share of the reduce-copy
// ---------------------------------------------------------------------------

// Thread `thread` of `num_threads` does: the head elements thread, thread + T,
// ...; the vectors thread, thread + T, ...; the tail elements likewise. Over all
// threads, every element exactly once. args: count elements at dst/dst2/a/b.
template <typename T>
DTL_HOST_DEVICE inline void reduce_copy_thread(const ReduceCopyArgs<T>& args, std::size_t thread,
                                               std::size_t num_threads) {
  // BEGIN SOLUTION
  // | Thread `thread` of `num_threads` does its share so that, over all threads, every
  // | element of [0, count) is done exactly once and nothing outside it is written: dst[i]
  // | (and dst2[i] when not null) = a[i] + b[i], added in fp32 and rounded once to T
  // | (to_float, from_float<T>), or a[i] when b is null; same result as reduce_copy_one() for
  // | every i. Must be correct for any pointers (offsets differ, counts 0 .. millions) and
  // | use 16-byte loads and stores (Pack<T>, load_pack, store_pack) wherever the alignment
  // | allows (handout part 2, D).
  constexpr std::size_t kVec = Pack<T>::kElements;
  const std::size_t count = args.count;
  const std::uintptr_t offset = offset_in_vector(args.dst);
  const bool vectors_possible = offset % sizeof(T) == 0 && offset_in_vector(args.a) == offset &&
                                (args.b == nullptr || offset_in_vector(args.b) == offset) &&
                                (args.dst2 == nullptr || offset_in_vector(args.dst2) == offset);
  // Head: up to the first aligned address (all of it when vectors are impossible).
  std::size_t head = count;
  if (vectors_possible) {
    const std::size_t to_aligned = ((kVectorBytes - offset) % kVectorBytes) / sizeof(T);
    head = to_aligned < count ? to_aligned : count;
  }
  const std::size_t vectors = (count - head) / kVec;
  const std::size_t tail = head + vectors * kVec;

  for (std::size_t i = thread; i < head; i += num_threads) reduce_copy_one(args, i);

  for (std::size_t v = thread; v < vectors; v += num_threads) {
    const std::size_t i = head + v * kVec;
    Pack<T> out = load_pack(args.a + i);
    if (args.b != nullptr) {
      const Pack<T> b = load_pack(args.b + i);
      for (std::size_t k = 0; k < kVec; ++k) out.elem[k] = from_float<T>(to_float(out.elem[k]) + to_float(b.elem[k]));
    }
    store_pack(args.dst + i, out);
    if (args.dst2 != nullptr) store_pack(args.dst2 + i, out);
  }

  for (std::size_t i = tail + thread; i < count; i += num_threads) reduce_copy_one(args, i);
  // END SOLUTION
}

}  // namespace dtl::lab03::detail
