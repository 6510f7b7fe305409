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
  // BEGIN SOLUTION(run_ipc_ring)
  // | Contract: on return every rank's `mine` holds the element-wise sum of all ranks'
  // | inputs, bit for bit as the virtual ring computes it, and no rank still reads or writes
  // | another's buffer. Every read of a neighbour's chunk must come after that chunk's last
  // | write, in another process, and every write after the last read of what it overwrites:
  // | use stream.wait() and agree() (given, in lab03/ring_cuda.h) where Note [Cross-process
  // | hazards] shows an ordering that no stream gives. A failure on one rank (dtl::Error from
  // | launch() or wait()) must make every rank throw, none hang. Handout: part 2, G.
  std::string failure;
  // Entry: my input has landed (the caller's upload may still be on my stream),
  // and so has everyone's: step 0 reads the left neighbour's input.
  try {
    stream.wait();
  } catch (const Error& e) {
    failure = e.what();
  }
  agree(comm, failure, "run_ipc_ring: another rank failed before step 0");
  for (int step = 0; step < 2 * (world_size - 1); ++step) {
    // The job depends on the step only, so a skipped step is skipped by every
    // rank and the agreements stay matched.
    const RingJob job = ring_job(rank, world_size, step, count, fuse);
    if (job.skip) continue;
    try {
      if (job.count > 0) stream.launch(ring_job_args(job, mine, left, right));
      // My reads and writes of this step are done...
      stream.wait();
    } catch (const Error& e) {
      failure = e.what();
    }
    // ...and so are everyone's: the next step reads what the left neighbour wrote
    // (and, at P = 2, overwrites what it read). After the last step this is the
    // exit handshake: no one touches my buffer any more.
    agree(comm, failure, "run_ipc_ring: another rank failed at step " + std::to_string(step));
  }
  // END SOLUTION
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
  // BEGIN SOLUTION(run_ipc_ring_flags)
  // | Contract: what run_ipc_ring() guarantees, in stream order: once this rank's stream
  // | has run what this call queued, `mine` holds the sum and no neighbour still reads or
  // | writes it, so whatever the caller queues next on the stream may read or refill it.
  // | The host queues the work and returns: no stream.wait(), and exactly one agree(),
  // | after queuing (it orders the hosts, not the streams). Every hazard of Note
  // | [Cross-process hazards] is ordered by signal() and wait_for() (Note [Step flags]).
  // | Flags only grow: a flag at least v means all that rank signalled up to v is done.
  // | Every flag is 0 before the first call; this call's values lie above all earlier
  // | calls' (`call` counts them) and below kFlagAbandoned. A rank whose queuing fails
  // | releases its neighbours' streams (kFlagAbandoned), and every rank throws.
  // | Handout: part 2, G2.
  const auto steps = static_cast<std::uint64_t>(2 * (world_size - 1));
  // Stage 1 is "my input is in place", stage 2 + s "my step s is done": steps + 1 stages a call.
  const std::uint64_t base = call * (steps + 1);
  std::string failure;
  try {
    stream.signal(base + 1);  // queued after the caller's upload: my input is there
    for (std::uint64_t step = 0; step < steps; ++step) {
      // Step s reads what the left neighbour made of its chunk at step s-1 (its input
      // at s = 0). The right neighbour needs no wait of its own: every rank waits for
      // its left before each step, so with my left at stage s-1, its left is at s-2,
      // and so on around the ring to my right, at s-(P-1) (at P = 2 the right is the
      // left). A chunk of mine that the right reads at its step s' I overwrite next at
      // step s'+P-1; the chunk the fused step writes into the right's buffer was last
      // read by the rank after it, at step 0. Both reads are done by then.
      stream.wait_for(Neighbour::kLeft, base + 1 + step);
      // The job depends on the step only, so every rank skips the same steps, and a
      // skipped step still signals: the next step waits for it.
      const RingJob job = ring_job(rank, world_size, static_cast<int>(step), count, fuse);
      if (!job.skip && job.count > 0) stream.launch(ring_job_args(job, mine, left, right));
      stream.signal(base + 2 + step);
    }
    // Exit: the right neighbour reads my buffer up to its last step, and the chain
    // above leaves it P-2 stages behind me, so whatever the caller queues next waits
    // for it. The left one last wrote my buffer (fused) at step P-2, which my own
    // waits have seen done.
    stream.wait_for(Neighbour::kRight, base + 1 + steps);
  } catch (const Error& e) {
    failure = e.what();
    try {
      stream.signal(kFlagAbandoned);  // the neighbours' streams wait for nothing more from me
    } catch (const Error&) {          // the stream itself is broken: nothing more to give
    }
  }
  agree(comm, failure, "run_ipc_ring_flags: another rank failed to queue its steps");
  // END SOLUTION
}

}  // namespace dtl::lab03::detail
