/// @file
/// @brief The one Communicator interface behind which every backend sits (Open MPI,
/// the lab-03 ring, NCCL, the alpha-beta network emulator), and the Work handle
/// that an asynchronous collective returns.
///
/// Labs 04-07 (DDP buckets, half-precision communication, FSDP shards, pipeline
/// stages) are written against this interface only, so that the same training
/// step can run on real shared memory, on a GPU, or on an emulated 10 GbE link.
///
/// The contract, for every backend:
///  - **Same operations, same order.** Every rank issues the same collectives,
///    with the same counts, types, ops and roots, in the same order. A backend
///    may run several operations at once, but it matches them by order. Issue
///    from one thread per communicator (the order must be well defined); the
///    Work handles may be waited for from any thread.
///  - **Hands off until wait().** Between issuing an operation and the return of
///    Work::wait() (or of a Work::test() that returned true), the operation owns
///    its buffers: do not read or write them, do not free them.
///  - **Errors surface in wait().** An operation that fails in the background
///    throws from wait() (or test()), and the message names the operation
///    ("allreduce #3 (sum, 1024 x f32 = 4 KiB)"), the backend and the rank.
///    Bad arguments throw at once, from the call that issues the operation.
///  - **Nothing leaks.** A Work destroyed before it was waited for is waited for
///    by its destructor, so a pending operation never outlives its handle.
///  - **No silent hangs.** wait() gives up after the communicator's timeout and
///    throws dtl::TimeoutError naming what it waited for; the usual cause is a
///    rank that skipped or reordered an operation.
///
/// Buffer layouts (P = world_size, the NCCL conventions):
///  - allreduce(buf, count): in place; every rank ends with the element-wise sum
///    (or average) of every rank's `buf`.
///  - broadcast(buf, count, root): in place; every rank ends with root's `buf`.
///  - reduce_scatter(send_buf, recv_buf, recv_count): send_buf holds P blocks of
///    recv_count elements; rank r receives block r reduced over all ranks. In
///    place when recv_buf == send_buf + r * recv_count.
///  - allgather(send_buf, recv_buf, send_count): recv_buf holds P blocks of
///    send_count elements; block r is rank r's send_buf. In place when
///    send_buf == recv_buf + r * send_count.
#pragma once

#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "harness/dtype.h"
#include "harness/error.h"
#include "harness/reduce_op.h"

namespace dtl {

// ---------------------------------------------------------------------------
// Element types, reductions, operations
// ---------------------------------------------------------------------------

// DType, dtype_size(), dtype_name(), Element and dtype_of() (harness/dtype.h);
// ReduceOp and reduce_op_name() (harness/reduce_op.h).

/// @brief The collectives of the interface.
enum class CollectiveKind {
  kAllreduce,      ///< see Communicator::allreduce()
  kBroadcast,      ///< see Communicator::broadcast()
  kReduceScatter,  ///< see Communicator::reduce_scatter()
  kAllgather,      ///< see Communicator::allgather()
};

/// @brief The collective's name.
/// @param[in] kind the collective.
/// @return "allreduce", "broadcast", "reduce_scatter" or "allgather".
const char* collective_name(CollectiveKind kind);

/// @brief One issued operation, as the base class hands it to a backend.
struct OpInfo {
  CollectiveKind kind = CollectiveKind::kAllreduce;  ///< which collective
  DType dtype = DType::kF32;                         ///< element type
  ReduceOp op = ReduceOp::kSum;                      ///< the reduction (allreduce, reduce_scatter)
  int root = 0;                                      ///< the root (broadcast)
  /// Elements: of `buf` (allreduce, broadcast), of one block (reduce_scatter:
  /// recv_count; allgather: send_count).
  std::size_t count = 0;
  int world_size = 1;         ///< P
  std::uint64_t sequence = 0;  ///< 0, 1, 2, ... per communicator: the order every rank must agree on
  std::string description;    ///< e.g. "allreduce #3 (sum, 1024 x f32 = 4 KiB) on mpi-thread"

  /// @brief The size n of the whole buffer, the n of the cost formulas.
  /// @return count x element size for allreduce and broadcast; P x that for
  ///         reduce_scatter (its input) and allgather (its output).
  std::size_t total_bytes() const;
};

/// @brief A monotonic clock in seconds, shared by every process on one host
/// (std::chrono::steady_clock), so that the spans of several ranks line up in one timeline.
/// @return seconds since an arbitrary fixed point (boot, on Linux).
double clock_seconds();

// ---------------------------------------------------------------------------
// Work: the handle of one asynchronous operation
// ---------------------------------------------------------------------------

/// @brief What a backend implements for each operation it issues (the inside of a Work).
///
/// A backend subclasses it; Work adds the timeout, the error context and the
/// wait-on-destruction. Times are clock_seconds(); they are final once the
/// operation is complete.
class WorkImpl {
 public:
  /// @brief Records what the operation is and when it was issued.
  /// @param[in] description what the operation is, for messages (OpInfo::description).
  /// @param[in] issue_seconds when the caller issued it; negative: now. The start time begins equal to it.
  explicit WorkImpl(std::string description, double issue_seconds = -1.0);
  /// @brief Backends release their resources; never throws.
  virtual ~WorkImpl() = default;
  WorkImpl(const WorkImpl&) = delete;
  WorkImpl& operator=(const WorkImpl&) = delete;

  /// @brief Checks for completion without blocking (and drives progress where the backend needs that).
  /// @return true once the operation is complete.
  /// @throws Error (or a subclass) if the operation failed.
  virtual bool test() = 0;
  /// @brief Blocks until the operation completes or clock_seconds() reaches `deadline`.
  /// @param[in] deadline_seconds a clock_seconds() time.
  /// @return true if complete, false if the deadline came first.
  /// @throws Error (or a subclass) if the operation failed.
  virtual bool wait_until(double deadline_seconds) = 0;

  /// @return what the operation is.
  const std::string& description() const noexcept { return description_; }
  /// @return when the caller issued it.
  double issue_seconds() const noexcept { return issue_; }
  /// @return when the data started to move (the issue time, or later if it waited in a queue or for a link).
  double start_seconds() const noexcept { return start_.load(); }
  /// @return when it completed (as observed by the backend); 0 while pending.
  double end_seconds() const noexcept { return end_.load(); }

 protected:
  /// @brief Sets the start time. @param[in] seconds a clock_seconds() time.
  void set_start(double seconds) noexcept { start_.store(seconds); }
  /// @brief Sets the end time. @param[in] seconds a clock_seconds() time.
  void set_end(double seconds) noexcept { end_.store(seconds); }

 private:
  std::string description_;
  double issue_;
  std::atomic<double> start_;
  std::atomic<double> end_{0.0};
};

/// @brief The handle of one asynchronous collective: wait(), test(), and its times.
///
/// Move-only. Destroying (or assigning over) a Work that was not waited for
/// waits for it first, so an operation never outlives its handle; an error or a
/// timeout met there is printed to stderr, since a destructor cannot throw.
class Work {
 public:
  /// @brief An empty handle: already complete, nothing to wait for.
  Work() = default;
  /// @brief Wraps a backend's operation.
  /// @param[in] impl the backend's operation (not null).
  /// @param[in] timeout_seconds how long wait() waits before throwing TimeoutError (0: forever).
  Work(std::unique_ptr<WorkImpl> impl, double timeout_seconds);
  /// @brief Waits for a pending operation (errors are printed, not thrown).
  ~Work();
  /// @brief Takes over `other`'s operation; `other` becomes empty.
  /// @param[in,out] other the handle to move from.
  Work(Work&& other) noexcept;
  /// @brief Waits for our own pending operation, then takes over `other`'s.
  /// @param[in,out] other the handle to move from.
  /// @return *this.
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  /// @brief Blocks until the operation is complete; its buffers are the caller's again.
  /// @throws TimeoutError naming the operation after the communicator's timeout.
  /// @throws Error (MpiError, ...) naming the operation and rank if it failed.
  void wait();
  /// @brief As wait(), with an explicit timeout.
  /// @param[in] timeout_seconds seconds to wait before throwing (0: forever).
  /// @throws TimeoutError naming the operation when the time runs out.
  /// @throws Error (MpiError, ...) naming the operation and rank if it failed.
  void wait(double timeout_seconds);
  /// @brief Waits up to `seconds` without throwing on a timeout.
  /// @param[in] seconds how long to wait at most.
  /// @return true if the operation is complete.
  /// @throws Error (MpiError, ...) naming the operation and rank if it failed.
  bool wait_for(double seconds);
  /// @brief Checks for completion without blocking.
  /// @return true if the operation is complete (its buffers are the caller's again).
  /// @throws Error (MpiError, ...) naming the operation and rank if it failed.
  bool test();
  /// @return true once wait() returned or test() returned true (or the handle is empty).
  bool completed() const noexcept { return impl_ == nullptr || done_; }

  /// @return what the operation is, e.g. "allreduce #3 (sum, 1024 x f32 = 4 KiB) on mpi-thread"
  ///         ("" for an empty handle).
  std::string description() const;
  /// @return when the caller issued it (clock_seconds()).
  double issue_seconds() const noexcept;
  /// @return when its data started to move (clock_seconds()).
  double start_seconds() const noexcept;
  /// @return when it completed (clock_seconds()); 0 while pending.
  double end_seconds() const noexcept;

 private:
  bool finish_or_throw(bool complete);

  std::unique_ptr<WorkImpl> impl_;
  double timeout_seconds_ = 0.0;
  bool done_ = false;
};

/// @brief Declares, inside a backend class deriving from Communicator (under
/// `protected:`), the four operations every backend implements: Communicator's
/// do_allreduce(), do_broadcast(), do_reduce_scatter() and do_allgather(), whose
/// contracts are documented there once. What a backend does for each is said
/// beside its definition, in the backend's .cc file.
#define DTL_COMMUNICATOR_OPERATIONS                                                                       \
  std::unique_ptr<WorkImpl> do_allreduce(void* buf, const OpInfo& info) override;                          \
  std::unique_ptr<WorkImpl> do_broadcast(void* buf, const OpInfo& info) override;                          \
  std::unique_ptr<WorkImpl> do_reduce_scatter(const void* send_buf, void* recv_buf, const OpInfo& info) override; \
  std::unique_ptr<WorkImpl> do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) override

namespace detail {

/// @brief The completion of an operation that a background thread finishes (a
/// CommThread's call, a polled MPI request): set once by that thread, waited on by
/// the caller's Work (completion_work()). Never calls MPI on the caller's side.
struct Completion {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;  ///< what the operation threw, rethrown by the Work
  double start = 0.0;        ///< when its data started to move (0: unknown, keep the issue time)
  double end = 0.0;          ///< when it completed

  /// @brief Marks it done (by the background thread) and wakes the waiters.
  /// @param[in] failure what the operation threw, or null.
  /// @param[in] start_seconds when it started (0: unknown).
  void complete(std::exception_ptr failure, double start_seconds);
};

/// @brief The caller's side of a Completion: test() and wait_until() on it.
/// @param[in] description what the operation is, for messages.
/// @param[in] completion set by the background thread.
/// @return the WorkImpl of a Work.
std::unique_ptr<WorkImpl> completion_work(std::string description, std::shared_ptr<Completion> completion);

struct CommTask;  // one queued call of a CommThread
}  // namespace detail

// ---------------------------------------------------------------------------
// A communication thread: blocking calls run one at a time, in FIFO order
// ---------------------------------------------------------------------------

/// @brief One thread that runs blocking communication calls, one after another, in
/// the order they were submitted, while the caller's thread computes.
///
/// See Note [Why a communication thread] in harness/comm/mpi_communicator.h. It
/// is the engine of MpiCommunicator's thread mode and of any backend whose calls
/// block (the lab-03 ring, for example): submit() returns at once with a
/// WorkImpl that completes when the thread has run the call.
class CommThread {
 public:
  /// @brief Starts the thread.
  /// @param[in] name what the thread serves, for messages (e.g. "mpi-thread").
  explicit CommThread(std::string name);
  /// @brief Runs what is still queued (every rank issued it, so it can finish), then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  /// @brief Queues `call` behind every call submitted before it.
  ///
  /// `call` runs on the communication thread; an exception it throws is kept
  /// and rethrown by the Work's wait(), prefixed with `description`.
  /// @param[in] description what the call is, for messages.
  /// @param[in] call the blocking call.
  /// @return the operation, complete when `call` has returned.
  std::unique_ptr<WorkImpl> submit(std::string description, std::function<void()> call);

  /// @return the number of calls queued or running.
  std::size_t pending() const;

 private:
  void run();

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<detail::CommTask>> queue_;
  std::size_t running_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------

/// @brief An asynchronous collective communicator over `world_size()` ranks.
///
/// Every collective here is issued by every rank, in the same order (see the
/// contract in this file's header). The public calls check their arguments, the
/// same way on every rank, number the operation and describe it, then hand it to
/// the backend's `do_*` function.
class Communicator {
 public:
  /// @brief Destroys the backend (after its pending operations complete).
  virtual ~Communicator() = default;

  /// @return this process's rank, in [0, world_size()).
  virtual int rank() const = 0;
  /// @return the number of ranks P.
  virtual int world_size() const = 0;
  /// @return the backend's name, e.g. "mpi-thread" or "emulated 10GbE (...) over mpi-thread".
  virtual std::string name() const = 0;

  /// @brief Sets how long Work::wait() waits before throwing TimeoutError (default 120 s;
  /// the DTL_COMM_TIMEOUT environment variable overrides the default).
  /// @param[in] seconds the timeout for operations issued from now on (0: wait forever).
  void set_timeout(double seconds) noexcept { timeout_seconds_ = seconds; }
  /// @return the timeout of operations issued from now on.
  double timeout() const noexcept { return timeout_seconds_; }

  /// @brief Starts an in-place allreduce. Collective: every rank must call this, in the same order.
  /// @param[in,out] buf `count` elements of `dtype`: this rank's contribution in, the result out.
  /// @param[in] count elements (the same on every rank).
  /// @param[in] dtype their type.
  /// @param[in] op ReduceOp::kSum or ReduceOp::kAvg (others: InvalidArgument naming `op`).
  /// @return the operation; `buf` is the caller's again after its wait().
  /// @throws InvalidArgument for a null buffer with count > 0, or a type or count the backend cannot handle.
  Work allreduce(void* buf, std::size_t count, DType dtype, ReduceOp op);
  /// @brief Starts an in-place broadcast from `root`. Collective: every rank must call this, in the same order.
  /// @param[in,out] buf `count` elements: root's are sent, every other rank's are overwritten.
  /// @param[in] count elements (the same on every rank).
  /// @param[in] dtype their type.
  /// @param[in] root the rank whose buffer everyone receives.
  /// @return the operation.
  /// @throws InvalidArgument for a bad root, a null buffer with count > 0, or a type the backend cannot handle.
  Work broadcast(void* buf, std::size_t count, DType dtype, int root);
  /// @brief Starts a reduce-scatter of equal blocks. Collective: every rank must call this, in the same order.
  /// @param[in] send_buf P x `recv_count` elements: block r is this rank's contribution to rank r.
  /// @param[out] recv_buf `recv_count` elements: block `rank()` reduced over all ranks. May be
  ///             send_buf + rank() x recv_count (in place).
  /// @param[in] recv_count elements per block (the same on every rank).
  /// @param[in] dtype their type.
  /// @param[in] op ReduceOp::kSum or ReduceOp::kAvg (others: InvalidArgument naming `op`).
  /// @return the operation.
  /// @throws InvalidArgument for null buffers with recv_count > 0, or a type or count the backend cannot handle.
  Work reduce_scatter(const void* send_buf, void* recv_buf, std::size_t recv_count, DType dtype, ReduceOp op);
  /// @brief Starts an allgather of equal blocks. Collective: every rank must call this, in the same order.
  /// @param[in] send_buf `send_count` elements: this rank's block. May be
  ///            recv_buf + rank() x send_count (in place).
  /// @param[out] recv_buf P x `send_count` elements: block r is rank r's send_buf.
  /// @param[in] send_count elements per block (the same on every rank).
  /// @param[in] dtype their type.
  /// @return the operation.
  /// @throws InvalidArgument for null buffers with send_count > 0, or a count the backend cannot handle.
  Work allgather(const void* send_buf, void* recv_buf, std::size_t send_count, DType dtype);

  /// @brief Typed allreduce(). Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in,out] buf this rank's contribution in, the result out.
  /// @param[in] op ReduceOp::kSum (default) or ReduceOp::kAvg.
  /// @return the operation.
  /// @throws InvalidArgument as the untyped allreduce().
  template <Element T>
  Work allreduce(std::span<T> buf, ReduceOp op = ReduceOp::kSum) {
    return allreduce(buf.data(), buf.size(), dtype_of<T>(), op);
  }
  /// @brief Typed broadcast(). Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in,out] buf root's data out, everyone else's in.
  /// @param[in] root the sending rank.
  /// @return the operation.
  /// @throws InvalidArgument as the untyped broadcast().
  template <Element T>
  Work broadcast(std::span<T> buf, int root) {
    return broadcast(buf.data(), buf.size(), dtype_of<T>(), root);
  }
  /// @brief Typed reduce_scatter(). Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in] send_buf P x recv_buf.size() elements.
  /// @param[out] recv_buf this rank's reduced block.
  /// @param[in] op ReduceOp::kSum (default) or ReduceOp::kAvg.
  /// @return the operation.
  /// @throws InvalidArgument unless send_buf.size() == world_size() x recv_buf.size(), or as the untyped call.
  template <Element T>
  Work reduce_scatter(std::span<const T> send_buf, std::span<T> recv_buf, ReduceOp op = ReduceOp::kSum) {
    require_blocks_of("reduce_scatter", "send_buf", send_buf.size(), recv_buf.size());
    return reduce_scatter(send_buf.data(), recv_buf.data(), recv_buf.size(), dtype_of<T>(), op);
  }
  /// @brief Typed allgather(). Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in] send_buf this rank's block.
  /// @param[out] recv_buf P x send_buf.size() elements.
  /// @return the operation.
  /// @throws InvalidArgument unless recv_buf.size() == world_size() x send_buf.size(), or as the untyped call.
  template <Element T>
  Work allgather(std::span<const T> send_buf, std::span<T> recv_buf) {
    require_blocks_of("allgather", "recv_buf", recv_buf.size(), send_buf.size());
    return allgather(send_buf.data(), recv_buf.data(), send_buf.size(), dtype_of<T>());
  }

  /// @brief allreduce() and wait. Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in,out] buf this rank's contribution in, the result out.
  /// @param[in] op ReduceOp::kSum (default) or ReduceOp::kAvg.
  /// @throws InvalidArgument, TimeoutError or the backend's Error, as allreduce() and Work::wait().
  template <Element T>
  void allreduce_blocking(std::span<T> buf, ReduceOp op = ReduceOp::kSum) {
    allreduce(buf, op).wait();
  }
  /// @brief broadcast() and wait. Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in,out] buf root's data out, everyone else's in.
  /// @param[in] root the sending rank.
  /// @throws InvalidArgument, TimeoutError or the backend's Error, as broadcast() and Work::wait().
  template <Element T>
  void broadcast_blocking(std::span<T> buf, int root) {
    broadcast(buf, root).wait();
  }
  /// @brief reduce_scatter() and wait. Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in] send_buf P x recv_buf.size() elements.
  /// @param[out] recv_buf this rank's reduced block.
  /// @param[in] op ReduceOp::kSum (default) or ReduceOp::kAvg.
  /// @throws InvalidArgument, TimeoutError or the backend's Error, as reduce_scatter() and Work::wait().
  template <Element T>
  void reduce_scatter_blocking(std::span<const T> send_buf, std::span<T> recv_buf, ReduceOp op = ReduceOp::kSum) {
    reduce_scatter(send_buf, recv_buf, op).wait();
  }
  /// @brief allgather() and wait. Collective: every rank must call this, in the same order.
  /// @tparam T float, double or std::int32_t.
  /// @param[in] send_buf this rank's block.
  /// @param[out] recv_buf P x send_buf.size() elements.
  /// @throws InvalidArgument, TimeoutError or the backend's Error, as allgather() and Work::wait().
  template <Element T>
  void allgather_blocking(std::span<const T> send_buf, std::span<T> recv_buf) {
    allgather(send_buf, recv_buf).wait();
  }

 protected:
  /// @brief Sets the default timeout (DTL_COMM_TIMEOUT, else 120 s).
  Communicator();

  /// @brief Starts `info` (kind kAllreduce) on `buf`. Called only with checked arguments.
  /// @param[in,out] buf the buffer, as allreduce().
  /// @param[in] info the checked, numbered, described operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_allreduce(void* buf, const OpInfo& info) = 0;
  /// @brief Starts `info` (kind kBroadcast) on `buf`.
  /// @param[in,out] buf the buffer, as broadcast().
  /// @param[in] info the operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_broadcast(void* buf, const OpInfo& info) = 0;
  /// @brief Starts `info` (kind kReduceScatter).
  /// @param[in] send_buf P blocks, as reduce_scatter().
  /// @param[out] recv_buf one block (possibly inside send_buf).
  /// @param[in] info the operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_reduce_scatter(const void* send_buf, void* recv_buf, const OpInfo& info) = 0;
  /// @brief Starts `info` (kind kAllgather).
  /// @param[in] send_buf one block (possibly inside recv_buf).
  /// @param[out] recv_buf P blocks.
  /// @param[in] info the operation.
  /// @return the backend's operation.
  virtual std::unique_ptr<WorkImpl> do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) = 0;

 private:
  OpInfo describe(CollectiveKind kind, std::size_t count, DType dtype, ReduceOp op, int root);
  void require_blocks_of(const char* function, const char* argument, std::size_t elements, std::size_t block) const;

  std::atomic<std::uint64_t> next_sequence_{0};
  double timeout_seconds_ = 120.0;
};

// ---------------------------------------------------------------------------
// Helpers for backends
// ---------------------------------------------------------------------------

/// @brief Divides `count` elements of `buf` by `world_size`, in place (the second half of ReduceOp::kAvg).
/// @param[in,out] buf the summed elements.
/// @param[in] count how many.
/// @param[in] dtype their type: kF32, kF64 or kI32 (integers truncate toward zero).
/// @param[in] world_size the divisor P.
/// @throws InvalidArgument for kF16 or kBF16.
void divide_in_place(void* buf, std::size_t count, DType dtype, int world_size);

/// @brief Rethrows the exception `error` with `context` in front of its message, keeping
/// its type where it is a dtl::Error subclass with a code (MpiError, NcclError, CudaError).
/// @param[in] error the exception a background operation threw.
/// @param[in] context what the operation was, e.g. its description.
/// @throws always: the same kind of Error, with the longer message.
[[noreturn]] void rethrow_with_context(std::exception_ptr error, const std::string& context);

}  // namespace dtl
