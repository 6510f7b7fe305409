/// @file
/// @brief The Open MPI backend of dtl::Communicator, in two progress modes:
/// nonblocking collectives (MPI_Iallreduce, ...) or blocking collectives on a
/// communication thread. See Note [Why a communication thread].
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"

namespace dtl {

// Note [Why a communication thread]
// ---------------------------------
// DDP wants an allreduce to run *while* backward computes. MPI offers two ways:
//
// (a) Nonblocking collectives: MPI_Iallreduce returns at once with a request;
//     MPI_Test/MPI_Wait complete it. But the MPI standard only promises
//     progress *inside* MPI calls, and Open MPI 4.1 on shared memory (ob1 +
//     vader, no progress thread) does exactly that: a nonblocking collective is a
//     schedule of point-to-point steps, and a step is advanced only when some
//     thread of the process calls into MPI. While the main thread computes and
//     calls nothing, the allreduce sits at its first step; the whole of it then
//     runs in the final MPI_Wait, after the compute, and nothing overlaps.
//     Calling MPI_Test now and then from the compute loop helps, but couples the
//     model code to the communication library.
//
// (b) A communication thread: one thread per communicator runs *blocking*
//     collectives (MPI_Allreduce, ...) taken from a FIFO queue. The blocking
//     call progresses itself, whatever the main thread does, and the FIFO keeps
//     the order identical on every rank (the contract). The thread works on its
//     own duplicated communicator, so its traffic never matches the main
//     thread's. The price: the main thread may call MPI too (its own
//     communicators, a test's checks) while the comm thread sits inside
//     MPI_Allreduce, so two threads are in MPI at once. That needs
//     MPI_THREAD_MULTIPLE; MPI_THREAD_SERIALIZED forbids exactly that, and
//     FUNNELED would allow MPI only on the main thread. The constructor checks
//     MPI_Query_thread and refuses thread mode, saying so, below
//     MPI_THREAD_MULTIPLE. (Open MPI 4.1.4 on Debian provides it.)
//
// (c) A progress thread (MpiMode::kPolling), in between: nonblocking collectives
//     issued by the caller, and a helper thread that calls MPI_Test on them and
//     *sleeps* in between (Note [Polling cadence] in mpi_communicator.cc: 10 us
//     after a new operation, doubling to every 100 us). A blocking collective on a comm thread
//     busy-polls the shared-memory queues for as long as it waits for a peer,
//     and on 2 cores that spinning takes a core from the compute; the progress
//     thread only takes what the copies themselves cost. Also MPI_THREAD_MULTIPLE.
//
// On a machine with spare cores (b) gives real overlap; on a 2-core machine with
// 2 ranks the comm thread competes with compute for the cores (shared-memory
// copies *are* CPU work), which is why lab 04 measures overlap on the emulated
// link (harness/comm/emulated_communicator.h) as well. Measured figures: see
// harness/README.md, "The Communicator".

/// @brief How an MpiCommunicator makes progress. See Note [Why a communication thread].
enum class MpiMode {
  kNonblocking,  ///< MPI_I* collectives; progress only inside MPI calls (Work::test/wait)
  kThread,       ///< blocking collectives on a communication thread, FIFO (needs MPI_THREAD_MULTIPLE)
  kPolling,      ///< MPI_I* collectives, MPI_Test'ed by a sleeping progress thread, 10 us after an issue, then up to every 100 us (needs MPI_THREAD_MULTIPLE)
};

/// @brief The mode's name.
/// @param[in] mode the mode.
/// @return "mpi-nonblocking", "mpi-thread" or "mpi-polling".
const char* mpi_mode_name(MpiMode mode);

namespace detail {
class Poller;  // the progress thread of MpiMode::kPolling
}  // namespace detail

/// @brief dtl::Communicator over Open MPI.
///
/// Works on its own duplicate of the parent communicator, so its messages never
/// match the caller's. Element types: kF32, kF64 and kI32 for everything; kF16
/// and kBF16 move (broadcast, allgather) but do not reduce yet. ReduceOp::kAvg is
/// MPI_SUM followed by a division by P on each rank, when the operation
/// completes. Counts above INT_MAX are refused (MPI's int counts).
///
/// Times of a Work: in thread mode, start is when the thread began the blocking
/// call and end when it returned; in nonblocking mode, start is the issue time
/// and end the first Work::test() or wait() that saw the request complete (an
/// upper bound: nothing tells MPI's progress engine to note the time); in
/// polling mode, the same, seen by the progress thread (within 10 to 100 us).
class MpiCommunicator final : public Communicator {
 public:
  /// @brief Duplicates `parent` (collective over `parent`) and, in thread mode, starts the thread.
  /// @param[in] parent the communicator to duplicate, e.g. MPI_COMM_WORLD.
  /// @param[in] mode MpiMode::kThread (default), MpiMode::kNonblocking or MpiMode::kPolling.
  /// @throws Error in thread or polling mode when MPI was initialized below MPI_THREAD_MULTIPLE
  ///         (checked before the duplication, so every rank throws together).
  /// @throws MpiError if MPI_Comm_dup fails.
  explicit MpiCommunicator(MPI_Comm parent, MpiMode mode = MpiMode::kThread);
  /// @brief Completes what is queued, stops the thread, frees the communicator.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  /// @brief Whether thread and polling modes are possible in this process.
  /// @return true when MPI_Query_thread reports MPI_THREAD_MULTIPLE.
  static bool thread_multiple_available();

  /// @return this process's rank.
  int rank() const override { return comm_.rank(); }
  /// @return the number of ranks.
  int world_size() const override { return comm_.size(); }
  /// @return "mpi-nonblocking", "mpi-thread" or "mpi-polling".
  std::string name() const override { return mpi_mode_name(mode_); }
  /// @return the progress mode.
  MpiMode mode() const noexcept { return mode_; }
  /// @return the duplicated communicator the collectives run on (still owned by this object).
  MPI_Comm get() const noexcept { return comm_.get(); }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  // Runs `blocking` on the thread (thread mode) or `nonblocking` now (nonblocking
  // mode); then `finish` once complete, on whichever thread sees it complete.
  std::unique_ptr<WorkImpl> start(const OpInfo& info, std::function<void()> blocking,
                                  const std::function<void(MPI_Request*)>& nonblocking,
                                  std::function<void()> finish, std::shared_ptr<void> keep_alive);

  MpiMode mode_;
  Comm comm_;
  std::unique_ptr<CommThread> thread_;
  std::unique_ptr<detail::Poller> poller_;
};

}  // namespace dtl
