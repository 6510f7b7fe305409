// Lab 03, task G: the ring across processes, each reading its neighbour's
// buffer directly: GPU memory mapped through CUDA IPC (IpcRing), or host memory
// in an MPI shared-memory window (IpcRingHost, the CPU tests' stand-in).
//
// What this file teaches: synchronization between processes that share memory.
// The ring itself is ring_job(), as in the virtual ring. What is new is that the
// ranks are separate processes, each with its own stream: nothing orders rank r's
// work after rank r-1's. Inside one process a stream gives "step s+1 after step
// s" for free; across processes the loop has to say it, with two tools:
//
//   wait()        my stream has finished everything queued on it (the kernel, and
//                 the caller's upload of my input), and its writes are visible
//   agree(comm)   every rank has got that far (an MPI_Allreduce of an "ok" flag:
//                 a barrier that also carries failure)
//
// Where those two are needed, and why each one is, is the task: see Note
// [Cross-process hazards] below, and the handout's part 2, G.
//
// The loop is written once, with the stream as a parameter (`stream` provides
// launch(const ReduceCopyArgs<T>&) and wait()), so the CPU tests run exactly
// the loop the GPU runs (given/ipc_ring.cc and given/ipc_ring_host.cc).
//
// Task G2, the same ring without a host round trip per step: the streams
// themselves signal and wait on step flags in memory the neighbours map, as
// NCCL's P2P transport does (Note [Step flags] below; handout part 2, G2).
//
// Left out: pipelining a step in slices so that the wait hides behind data
// movement (NCCL's slices), and a kernel that polls the flags itself.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/error.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03::detail {

// Note [Cross-process hazards]
// Rank r's step s reads chunk c of its left neighbour's buffer and writes chunk
// c of its own (fused: also of its right neighbour's). Three orderings must hold
// between processes, and no stream provides any of them:
//  - entry: r's first read of left[c] comes after the left neighbour's input is
//    in place. The caller filled data() on its own stream, maybe not finished yet,
//    and the neighbour may not even have started filling.
//  - each step: r's read at step s+1 comes after the left neighbour's write at
//    step s (read after write); with P = 2 r's write at step s+1 also comes after
//    the neighbour's read at step s of the same chunk (write after read).
//  - exit: when allreduce() returns, no one still writes r's buffer (fused: the
//    left neighbour writes right[c] into it) or reads it (the right neighbour),
//    so the caller may read it, or refill it for the next call.
// The first GPU run (H100, 2026-11-27) returned wrong sums at 2-4 processes: the
// loop had the per-step handshake but not the entry one, and step 0 read
// neighbours' buffers before their inputs landed. IpcRingHost's slow ranks make
// each missing handshake fail every time (tests/ipc_ring_host_test.cc).

/// @brief Task G: the 2(P-1) steps of the pull-model ring across processes (collective over `comm`).
/// @tparam T float, __half or __nv_bfloat16.
/// @tparam Stream provides `void launch(const ReduceCopyArgs<T>&)`, which queues
///         one reduce-copy after everything queued before it and returns at once,
///         and `void wait()`, which returns when everything queued (the caller's
///         upload of `mine` included) has finished and is visible to the other
///         processes; both throw dtl::Error on failure.
/// @param[in] comm the ranks of the ring; every rank calls this together.
/// @param[in] rank, world_size this rank and P.
/// @param[in] count elements of every rank's buffer.
/// @param[in] fuse whether to fold step P-1 into step P-2.
/// @param[in,out] mine this rank's buffer: in, its contribution; out, the sum.
/// @param[in] left the left neighbour's buffer, mapped into this process.
/// @param[in,out] right the right neighbour's buffer (written only by the fused step).
/// @param[in] stream this rank's stream.
/// @throws Error on every rank when a launch or a wait failed on any rank.
template <typename T, typename Stream>
void run_ipc_ring(MPI_Comm comm, int rank, int world_size, std::size_t count, bool fuse, T* mine, const T* left,
                  T* right, Stream& stream) {
  if (world_size == 1 || count == 0) return;  // nothing to add up: no steps
  // TODO(student): Contract: on return every rank's `mine` holds the element-wise sum of all ranks'
  //   inputs, bit for bit as the virtual ring computes it, and no rank still reads or writes
  //   another's buffer. Every read of a neighbour's chunk must come after that chunk's last
  //   write, in another process, and every write after the last read of what it overwrites:
  //   use stream.wait() and agree() (given, in lab03/ring_cuda.h) where Note [Cross-process
  //   hazards] shows an ordering that no stream gives. A failure on one rank (dtl::Error from
  //   launch() or wait()) must make every rank throw, none hang. Handout: part 2, G.
  throw dtl::NotImplemented("run_ipc_ring");
}

// Note [Step flags]
// Task G pays a host round trip per step: the host waits for its stream to drain
// (cudaStreamSynchronize), then for every rank (an MPI_Allreduce), and only then
// queues the next step. The GPU idles meanwhile, and the slowest rank sets every
// step's pace. G2 puts the orderings of Note [Cross-process hazards] on the
// streams instead. Each rank owns one 64-bit flag, next to its buffer, which its
// neighbours map too, and its stream offers two more operations:
//
//   signal(v)            once everything queued before it is done, and its writes
//                        are visible to the other processes, set my flag to v
//   wait_for(side, v)    hold everything queued after it until that neighbour's
//                        flag is at least v (a cyclic comparison: (int64)(f - v) >= 0)
//
// On a GPU these are cuStreamWriteValue64 and cuStreamWaitValue64, done by the
// GPU's front end between kernels (no kernel spins, no host involved); in the CPU
// stand-in, an atomic store and a spin of the stream's thread. The host queues the
// whole call and returns. A flag starts at 0 and only ever grows, over calls too, so
// "my flag is at least v" means "every stage I numbered up to v is done". Only a rank's two
// neighbours touch its buffer, so no rank needs to hear from any other.

/// @brief Task G2: the 2(P-1) steps of task G's ring, ordered by step flags on the
/// streams instead of host waits and agreements (Note [Step flags]). Queues the work
/// and returns; the sum is in `mine` in stream order.
/// @tparam T float, __half or __nv_bfloat16.
/// @tparam Stream as for run_ipc_ring(), plus `void signal(std::uint64_t v)` and
///         `void wait_for(Neighbour side, std::uint64_t v)` (Note [Step flags]), both
///         queued like launch(); any of the three may throw dtl::Error.
/// @param[in] comm the ranks of the ring; every rank calls this together.
/// @param[in] rank, world_size this rank and P.
/// @param[in] count elements of every rank's buffer.
/// @param[in] fuse whether to fold step P-1 into step P-2.
/// @param[in,out] mine this rank's buffer: in, its contribution; out, the sum.
/// @param[in] left the left neighbour's buffer, mapped into this process.
/// @param[in,out] right the right neighbour's buffer (written only by the fused step).
/// @param[in] stream this rank's stream.
/// @param[in] call how many times this ring ran this loop before (0, 1, 2, ...), the
///            same on every rank: every flag value of this call must lie above every
///            value of the calls before it, and above 0 (each flag's value before the
///            first call), and below kFlagAbandoned (2^62: no ring makes that many calls).
/// @throws Error on every rank when queuing failed on any rank.
template <typename T, typename Stream>
void run_ipc_ring_flags(MPI_Comm comm, int rank, int world_size, std::size_t count, bool fuse, T* mine,
                        const T* left, T* right, Stream& stream, std::uint64_t call) {
  if (world_size == 1 || count == 0) return;  // nothing to add up: no steps
  // TODO(student): Contract: what run_ipc_ring() guarantees, in stream order: once this rank's stream
  //   has run what this call queued, `mine` holds the sum and no neighbour still reads or
  //   writes it, so whatever the caller queues next on the stream may read or refill it.
  //   The host queues the work and returns: no stream.wait(), and exactly one agree(),
  //   after queuing (it orders the hosts, not the streams). Every hazard of Note
  //   [Cross-process hazards] is ordered by signal() and wait_for() (Note [Step flags]).
  //   Flags only grow: a flag at least v means all that rank signalled up to v is done.
  //   Every flag is 0 before the first call; this call's values lie above all earlier
  //   calls' (`call` counts them) and below kFlagAbandoned. A rank whose queuing fails
  //   releases its neighbours' streams (kFlagAbandoned), and every rank throws.
  //   Handout: part 2, G2.
  throw dtl::NotImplemented("run_ipc_ring_flags");
}

}  // namespace dtl::lab03::detail
