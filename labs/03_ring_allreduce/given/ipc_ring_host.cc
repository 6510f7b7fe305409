// Lab 03, task G on CPUs: the ring across processes with host memory shared
// through an MPI shared-memory window instead of GPU memory shared through CUDA
// IPC, for the CPU tests (and for students without a GPU).
//
// The two pieces a GPU provides are played by:
//   - memory a neighbour can address: MPI_Win_allocate_shared gives each rank a
//     segment of one shared mapping, and MPI_Win_shared_query turns a
//     neighbour's segment into a pointer in this process (cudaIpcGetMemHandle /
//     cudaIpcOpenMemHandle on a GPU);
//   - a stream: one host thread per rank runs the queued work in order, after
//     the host returned, as a CUDA stream runs kernels; wait() is
//     cudaStreamSynchronize. A HostDelay makes some ranks' streams lag, so that
//     a loop that does not wait where it must reads too early every time;
//   - task G2's step flags (cuStreamWriteValue64 / cuStreamWaitValue64 on a
//     GPU): a 64-bit word after each rank's buffer in its segment; signal() is
//     an atomic store by the stream's thread, wait_for() a spin of that thread
//     on the neighbour's word (yielding, and failing after kFlagWaitLimit with
//     what it waited for: a loop that waits for a stage no one signals is a
//     deadlock, and is reported as one).
// Task G's and G2's loops (src/ipc_ring.h) run unchanged on top.
//
// Memory ordering between processes: the window is opened for passive access
// once (MPI_Win_lock_all) and MPI_Win_sync is a memory barrier on it. wait()
// ends with one (this rank's writes are visible) and launch() starts with one
// (what the others made visible before the last agreement is seen).
#if DTL_LAB_HAS_CUDA
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "ipc_ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {
namespace {

// How long a stream's wait_for() spins before it gives up: far beyond any wait of
// the tests (their slow ranks lag 10-15 ms a piece; a whole test at 8 ranks on 2
// cores takes under 2 s), short enough that a loop that deadlocks learns it in
// seconds, test after test.
constexpr std::chrono::seconds kFlagWaitLimit{10};

// A worker thread that runs queued work in order; each piece starts `delay`
// after the thread takes it. The first exception is kept and rethrown by wait(),
// and the work queued behind it is dropped (as a CUDA error ends a stream's work):
// a stream that timed out waiting for a flag reports it once, not once per wait.
class HostWorker {
 public:
  explicit HostWorker(std::chrono::microseconds delay) : delay_(delay), thread_([this] { run(); }) {}
  ~HostWorker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Queues `work`; `delayed`: it starts `delay` after the thread takes it (data
  // movement), else at once (a flag's signal or wait).
  void enqueue(std::function<void()> work, bool delayed = true) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({std::move(work), delayed});
    }
    changed_.notify_all();
  }

  // Until everything queued so far has run; rethrows the first failure.
  void wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
    if (!failure_.empty()) throw Error(std::exchange(failure_, {}));
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_, nothing left
      Piece piece = std::move(queue_.front());
      queue_.pop_front();
      if (!failure_.empty()) continue;  // a failed stream runs nothing more until wait() reports it
      busy_ = true;
      lock.unlock();
      if (piece.delayed && delay_.count() > 0) std::this_thread::sleep_for(delay_);
      std::string failed;
      try {
        piece.work();
      } catch (const std::exception& e) {
        failed = e.what();
      }
      lock.lock();
      busy_ = false;
      if (!failed.empty() && failure_.empty()) failure_ = failed;
      changed_.notify_all();
    }
  }

  struct Piece {
    std::function<void()> work;
    bool delayed;
  };
  std::chrono::microseconds delay_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Piece> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::string failure_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace

// Task G's stream on a CPU: launch() queues the kernel's per-thread work, run for
// every simulated thread, on the worker; wait() waits for the worker. Task G2's
// signal() and wait_for() are queued on the same worker.
template <GpuElement T>
class IpcRingHost<T>::Stream {
 public:
  // The step flags: this rank's, and its neighbours' (names for wait_for()'s message).
  struct Flags {
    std::uint64_t* mine;
    std::uint64_t* left;
    std::uint64_t* right;
    int rank, left_rank, right_rank;
  };
  Stream(MPI_Win window, std::size_t host_threads, std::chrono::microseconds delay, Flags flags)
      : window_(window), host_threads_(host_threads), flags_(flags), worker_(delay) {}

  void launch(const ReduceCopyArgs<T>& args) {
    if (fail_after_ == 0) {
      throw Error("IpcRingHost: rank " + std::to_string(flags_.rank) + "'s launch failed (injected by the test)");
    }
    if (fail_after_ > 0) --fail_after_;
    DTL_MPI_CHECK(MPI_Win_sync(window_));
    const std::size_t threads = host_threads_;
    worker_.enqueue([args, threads] {
      for (std::size_t t = 0; t < threads; ++t) reduce_copy_host_thread(args, t, threads);
    });
  }
  void copy(T* dst, std::vector<T> values) {
    worker_.enqueue([dst, values = std::move(values)] { std::copy(values.begin(), values.end(), dst); });
  }
  void fail_after(int launches) { fail_after_ = launches; }
  void copy_out(T* dst, const T* src, std::size_t count) {
    worker_.enqueue([dst, src, count] { std::copy(src, src + count, dst); });
  }
  void wait() {
    worker_.wait();
    DTL_MPI_CHECK(MPI_Win_sync(window_));
  }
  // Release: the work queued before (this thread ran it) is visible to whoever
  // reads this value with acquire.
  void signal(std::uint64_t value) {
    worker_.enqueue([flag = flags_.mine, value] { std::atomic_ref(*flag).store(value, std::memory_order_release); },
                    false);
  }
  void wait_for(Neighbour side, std::uint64_t value) {
    const bool left = side == Neighbour::kLeft;
    std::uint64_t* flag = left ? flags_.left : flags_.right;
    const std::string who = std::string(left ? "left" : "right") + " neighbour (rank " +
                            std::to_string(left ? flags_.left_rank : flags_.right_rank) + ")";
    worker_.enqueue(
        [flag, value, who, me = flags_.rank] {
          const auto reached = [&] {
            return static_cast<std::int64_t>(std::atomic_ref(*flag).load(std::memory_order_acquire) - value) >= 0;
          };
          const auto deadline = std::chrono::steady_clock::now() + kFlagWaitLimit;
          for (int spins = 0; !reached(); ++spins) {
            // Yield at first, then sleep: more ranks than cores must not starve the
            // neighbour this thread waits for.
            if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
            if (std::chrono::steady_clock::now() > deadline) {
              throw Error("IpcRingHost: rank " + std::to_string(me) + "'s stream waited " +
                          std::to_string(kFlagWaitLimit.count()) + " s for its " + who + "'s flag to reach " +
                          std::to_string(value) + "; it is at " +
                          std::to_string(std::atomic_ref(*flag).load()) +
                          " (a deadlock: no one signals what this stream waits for)");
            }
            std::this_thread::yield();
          }
        },
        false);
  }

 private:
  MPI_Win window_;
  std::size_t host_threads_;
  Flags flags_;
  int fail_after_ = -1;  // launches until an injected failure (fail_launch_after()); negative: none
  HostWorker worker_;
};

template <GpuElement T>
IpcRingHost<T>::IpcRingHost(MPI_Comm comm, std::size_t count, HostDelay delay, std::size_t host_threads)
    : comm_(comm), count_(count), host_threads_(host_threads) {
  rank_ = comm_.rank();
  world_size_ = comm_.size();
  DTL_REQUIRE_ARG(host_threads >= 1, "IpcRingHost", "host_threads", "is 0; simulate at least one");
  // A shared-memory window needs every rank on one machine.
  MPI_Comm node = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  DTL_REQUIRE_ARG(node_size == world_size_, "IpcRingHost", "comm",
                  "spans several machines (" + std::to_string(node_size) + " of its " + std::to_string(world_size_) +
                      " ranks share memory with this one); the stand-in needs them all on one");
  slow_ = delay.slow.count() > 0 && (static_cast<unsigned>(rank_) + delay.seed) % 2 == 1;

  // Each rank's own segment, not one contiguous block: an out-of-bounds write
  // then cannot land silently in the neighbour's buffer.
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  // The buffer, then the step flag (task G2) on a 256-byte boundary.
  const std::size_t flag_at = flag_offset(count, sizeof(T));
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(flag_at + sizeof(std::uint64_t)), 1, info, comm_,
                                         &base, &window_);
  MPI_Info_free(&info);
  DTL_MPI_CHECK(rc);
  mine_ = static_cast<T*>(base);
  // The neighbours' segments, as pointers in this process (cudaIpcOpenMemHandle's role).
  auto segment = [this](int owner) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* ptr = nullptr;
    DTL_MPI_CHECK(MPI_Win_shared_query(window_, owner, &bytes, &unit, &ptr));
    return static_cast<std::byte*>(ptr);
  };
  const int left = (rank_ + world_size_ - 1) % world_size_, right = (rank_ + 1) % world_size_;
  const auto flag = [flag_at](std::byte* segment_base) {
    return reinterpret_cast<std::uint64_t*>(segment_base + flag_at);
  };
  left_ = reinterpret_cast<T*>(segment(left));
  right_ = reinterpret_cast<T*>(segment(right));
  const typename Stream::Flags flags{flag(static_cast<std::byte*>(base)), flag(segment(left)), flag(segment(right)),
                                     rank_, left, right};
  *flags.mine = 0;
  DTL_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  DTL_MPI_CHECK(MPI_Win_sync(window_));
  DTL_MPI_CHECK(MPI_Barrier(comm_));  // every flag is 0 before any rank's stream reads one
  stream_ = std::make_unique<Stream>(window_, host_threads, slow_ ? delay.slow : std::chrono::microseconds{0}, flags);
}

template <GpuElement T>
IpcRingHost<T>::~IpcRingHost() {
  try {
    stream_->wait();
  } catch (...) {  // destructors never throw
  }
  stream_.reset();
  MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);  // collective: no rank frees memory another still reads
}

template <GpuElement T>
void IpcRingHost<T>::upload(std::span<const T> values) {
  DTL_REQUIRE_ARG(values.size() == count_, "IpcRingHost::upload", "values",
                  "has " + std::to_string(values.size()) + " elements; the ring's buffers have " +
                      std::to_string(count_));
  stream_->copy(mine_, std::vector<T>(values.begin(), values.end()));
}

template <GpuElement T>
void IpcRingHost<T>::fail_launch_after(int launches) {
  stream_->fail_after(launches);
}

template <GpuElement T>
void IpcRingHost<T>::copy_out(std::span<T> out) {
  DTL_REQUIRE_ARG(out.size() == count_, "IpcRingHost::copy_out", "out",
                  "has " + std::to_string(out.size()) + " elements; the ring's buffers have " + std::to_string(count_));
  stream_->copy_out(out.data(), mine_, count_);
}

template <GpuElement T>
std::vector<T> IpcRingHost<T>::download() {
  stream_->wait();
  return std::vector<T>(mine_, mine_ + count_);
}

template <GpuElement T>
void IpcRingHost<T>::allreduce(bool fuse, IpcSync sync) {
  if (sync == IpcSync::kHost) {
    detail::run_ipc_ring(comm_, rank_, world_size_, count_, fuse, mine_, left_, right_, *stream_);
    return;
  }
  if (broken_) throw Error("IpcRingHost::allreduce(IpcSync::kFlags): an earlier call failed, and its flags released "
                           "every wait (kFlagAbandoned); make a new ring");
  try {
    detail::run_ipc_ring_flags(comm_, rank_, world_size_, count_, fuse, mine_, left_, right_, *stream_, calls_);
  } catch (const Error&) {
    broken_ = true;
    throw;
  }
  ++calls_;
}

template class IpcRingHost<float>;
template class IpcRingHost<__half>;
template class IpcRingHost<__nv_bfloat16>;

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
