// The Open MPI backend: nonblocking collectives, or blocking ones on a
// communication thread. See Note [Why a communication thread] in the header.
#include "harness/comm/mpi_communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sys/prctl.h>
#include <thread>
#include <utility>
#include <vector>

namespace dtl {

namespace {

void require_reducible(const char* function, DType dtype) {
  DTL_REQUIRE_ARG(dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kI32, function, "dtype",
                  std::string("is ") + dtype_name(dtype) +
                      "; MpiCommunicator reduces f32, f64 and i32 (16-bit reductions come with lab 05)");
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Nonblocking mode: one MPI request. Progress happens only in MPI_Test, here.
class RequestWork final : public WorkImpl {
 public:
  RequestWork(std::string description, MPI_Request request, std::function<void()> finish,
              std::shared_ptr<void> keep_alive)
      : WorkImpl(std::move(description)),
        request_(request),
        finish_(std::move(finish)),
        keep_alive_(std::move(keep_alive)) {}

  bool test() override {
    if (complete_) return true;
    int flag = 0;
    DTL_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag) {
      complete_ = true;
      if (finish_) finish_();
      set_end(clock_seconds());
    }
    return complete_;
  }
  bool wait_until(double deadline_seconds) override {
    // MPI_Wait has no deadline, so poll; each MPI_Test also advances the operation.
    while (!test()) {
      if (clock_seconds() >= deadline_seconds) return false;
      std::this_thread::yield();
    }
    return true;
  }

 private:
  MPI_Request request_;
  std::function<void()> finish_;
  std::shared_ptr<void> keep_alive_;  // scratch copies the request reads from
  bool complete_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------
// The progress thread of MpiMode::kPolling
// ---------------------------------------------------------------------------

namespace detail {

// One request the progress thread watches, shared with the caller's Work.
struct PollTask : Completion {
  MPI_Request request = MPI_REQUEST_NULL;
  std::function<void()> finish;
  std::shared_ptr<void> keep_alive;
};

// Note [Polling cadence]
// ~~~~~~~~~~~~~~~~~~~~~~
// Open MPI's nonblocking collectives (libnbc) advance only inside an MPI call: a
// collective of r rounds needs at least r calls of MPI_Test, and between two
// calls this thread sleeps, to leave the cores to the compute. With a fixed
// 100 us sleep (and Linux's default 50 us timer slack on top) every round of a
// small collective waited for the next poll: a 128 KiB reduce-scatter, which
// libnbc does in more rounds than an all-gather, took about 1.2 ms at 2 ranks,
// and lab 08's sequence-parallel step, 9 of them per step, lost 5% to plain
// tensor parallelism on polling alone. So the thread polls soon after each new
// operation, 10 us later, then backs off, doubling the sleep up to 100 us, and
// asks for a 1 ns timer slack so that a 10 us sleep is about 10 us. A long
// transfer still sees one poll per 100 us after the first few, and each poll is
// one MPI_Test per pending request: a few more wake-ups per collective, no
// spinning. Measured (lab 08's bench, 2 ranks, load 3.5): the waits of the 23
// collectives of a sequence-parallel step went from 17-23 ms to 9-11 ms, and
// SP/TP from 1.047 and 1.058 to 0.976 and 0.991 (bench/RESULTS.md there).
class Poller {
 public:
  Poller() : thread_([this] { run(); }) {}
  ~Poller() {  // completes what is pending (every rank issued it), then stops
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void watch(std::shared_ptr<PollTask> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      ++watched_;
    }
    cv_.notify_all();
  }

 private:
  static constexpr auto kFirstInterval = std::chrono::microseconds(10);
  static constexpr auto kInterval = std::chrono::microseconds(100);

  void run() {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // short sleeps wake on time (the default slack is 50 us)
    std::size_t seen = 0;                     // tasks watched so far, to see a new one
    auto interval = kFirstInterval;
    for (;;) {
      std::vector<std::shared_ptr<PollTask>> tasks;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        tasks = tasks_;
        if (watched_ != seen) seen = watched_, interval = kFirstInterval;  // a new operation: poll soon
      }
      for (auto& task : tasks) poll(*task);
      {
        std::lock_guard lock(mutex_);
        std::erase_if(tasks_, [](const std::shared_ptr<PollTask>& t) {
          std::lock_guard task_lock(t->mutex);
          return t->done;
        });
        if (tasks_.empty()) continue;
      }
      std::this_thread::sleep_for(interval);  // give the core back to the compute
      interval = std::min(2 * interval, std::chrono::microseconds(kInterval));
    }
  }
  static void poll(PollTask& task) {
    int flag = 0;
    std::exception_ptr error;
    try {
      DTL_MPI_CHECK(MPI_Test(&task.request, &flag, MPI_STATUS_IGNORE));
      if (flag && task.finish) task.finish();
    } catch (...) {
      error = std::current_exception();
      flag = 1;
    }
    if (!flag) return;
    task.complete(error, 0.0);  // the start is unknown: the Work keeps its issue time
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PollTask>> tasks_;
  std::size_t watched_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace detail

const char* mpi_mode_name(MpiMode mode) {
  switch (mode) {
    case MpiMode::kNonblocking: return "mpi-nonblocking";
    case MpiMode::kThread: return "mpi-thread";
    case MpiMode::kPolling: return "mpi-polling";
  }
  return "?";
}

bool MpiCommunicator::thread_multiple_available() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

namespace {
// Checked before MPI_Comm_dup, so that every rank throws before any collective.
MpiMode checked_mode(MpiMode mode) {
  if (mode != MpiMode::kNonblocking && !MpiCommunicator::thread_multiple_available()) {
    throw Error(
        std::string("MpiCommunicator(") + mpi_mode_name(mode) +
        "): MPI was initialized without MPI_THREAD_MULTIPLE [" + where_am_i() +
        "]. The communication thread calls MPI while the main thread may call it too, which needs "
        "MPI_THREAD_MULTIPLE. Initialize with MpiSession(&argc, &argv, MPI_THREAD_MULTIPLE) (the test main "
        "does), or use MpiMode::kNonblocking. See Note [Why a communication thread].");
  }
  return mode;
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent, MpiMode mode) : mode_(checked_mode(mode)), comm_(parent) {
  if (mode_ == MpiMode::kThread) thread_ = std::make_unique<CommThread>(mpi_mode_name(mode_));
  if (mode_ == MpiMode::kPolling) poller_ = std::make_unique<detail::Poller>();
}

// The thread (or the progress thread) drains its queue before it stops: every
// rank issued those operations, so they complete. Only then is the
// communicator freed (comm_ is destroyed after this body).
MpiCommunicator::~MpiCommunicator() {
  thread_.reset();
  poller_.reset();
}

std::unique_ptr<WorkImpl> MpiCommunicator::start(const OpInfo& info, std::function<void()> blocking,
                                                 const std::function<void(MPI_Request*)>& nonblocking,
                                                 std::function<void()> finish, std::shared_ptr<void> keep_alive) {
  if (mode_ == MpiMode::kThread) {
    return thread_->submit(info.description, [blocking = std::move(blocking), finish = std::move(finish),
                                               keep_alive = std::move(keep_alive)] {
      blocking();
      if (finish) finish();
    });
  }
  MPI_Request request = MPI_REQUEST_NULL;
  nonblocking(&request);
  if (mode_ == MpiMode::kPolling) {
    auto task = std::make_shared<detail::PollTask>();
    task->request = request;
    task->finish = std::move(finish);
    task->keep_alive = std::move(keep_alive);
    auto work = detail::completion_work(info.description, task);  // waits on the task, never calls MPI
    poller_->watch(std::move(task));
    return work;
  }
  return std::make_unique<RequestWork>(info.description, request, std::move(finish), std::move(keep_alive));
}

// do_allreduce: MPI_Iallreduce or MPI_Allreduce (MPI_IN_PLACE, MPI_SUM), then the division for kAvg.
std::unique_ptr<WorkImpl> MpiCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  require_reducible("allreduce", info.dtype);
  const int count = to_mpi_count(info.count, "allreduce", "count");
  const MPI_Datatype type = mpi_datatype_of(info.dtype);
  MPI_Comm comm = comm_.get();
  std::function<void()> finish;
  if (info.op == ReduceOp::kAvg) {
    finish = [buf, info] { divide_in_place(buf, info.count, info.dtype, info.world_size); };
  }
  return start(
      info, [=] { DTL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count, type, MPI_SUM, comm)); },
      [=](MPI_Request* request) {
        DTL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, MPI_SUM, comm, request));
      },
      std::move(finish), nullptr);
}

// do_broadcast: MPI_Ibcast or MPI_Bcast.
std::unique_ptr<WorkImpl> MpiCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  const int count = to_mpi_count(info.count, "broadcast", "count");
  const MPI_Datatype type = mpi_datatype_of(info.dtype);
  const int root = info.root;
  MPI_Comm comm = comm_.get();
  return start(
      info, [=] { DTL_MPI_CHECK(MPI_Bcast(buf, count, type, root, comm)); },
      [=](MPI_Request* request) { DTL_MPI_CHECK(MPI_Ibcast(buf, count, type, root, comm, request)); }, nullptr,
      nullptr);
}

// do_reduce_scatter: MPI_(I)reduce_scatter_block; in place through a copy of the input.
std::unique_ptr<WorkImpl> MpiCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                             const OpInfo& info) {
  require_reducible("reduce_scatter", info.dtype);
  const int count = to_mpi_count(info.count, "reduce_scatter", "recv_count");
  to_mpi_count(info.count * static_cast<std::size_t>(info.world_size), "reduce_scatter", "send_buf");
  const MPI_Datatype type = mpi_datatype_of(info.dtype);
  MPI_Comm comm = comm_.get();
  // MPI_IN_PLACE for reduce_scatter_block expects the result at the *front* of
  // the buffer, not at block `rank` as NCCL does; an overlapping input is copied instead.
  std::shared_ptr<std::vector<std::byte>> copy;
  const void* input = send_buf;
  const std::size_t block_bytes = info.count * dtype_size(info.dtype);
  if (overlap(send_buf, info.total_bytes(), recv_buf, block_bytes)) {
    const auto* first = static_cast<const std::byte*>(send_buf);
    copy = std::make_shared<std::vector<std::byte>>(first, first + info.total_bytes());
    input = copy->data();
  }
  std::function<void()> finish;
  if (info.op == ReduceOp::kAvg) {
    finish = [recv_buf, info] { divide_in_place(recv_buf, info.count, info.dtype, info.world_size); };
  }
  return start(
      info, [=] { DTL_MPI_CHECK(MPI_Reduce_scatter_block(input, recv_buf, count, type, MPI_SUM, comm)); },
      [=](MPI_Request* request) {
        DTL_MPI_CHECK(MPI_Ireduce_scatter_block(input, recv_buf, count, type, MPI_SUM, comm, request));
      },
      std::move(finish), copy);
}

// do_allgather: MPI_(I)allgather; in place with MPI_IN_PLACE.
std::unique_ptr<WorkImpl> MpiCommunicator::do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) {
  const int count = to_mpi_count(info.count, "allgather", "send_count");
  to_mpi_count(info.count * static_cast<std::size_t>(info.world_size), "allgather", "recv_buf");
  const MPI_Datatype type = mpi_datatype_of(info.dtype);
  MPI_Comm comm = comm_.get();
  const std::size_t block_bytes = info.count * dtype_size(info.dtype);
  const auto* own_block = static_cast<const std::byte*>(recv_buf) + block_bytes * static_cast<std::size_t>(rank());
  std::shared_ptr<std::vector<std::byte>> copy;
  const void* input = send_buf;
  if (block_bytes > 0 && send_buf == own_block) {
    input = MPI_IN_PLACE;  // MPI's in-place allgather has exactly NCCL's layout
  } else if (overlap(send_buf, block_bytes, recv_buf, info.total_bytes())) {
    const auto* first = static_cast<const std::byte*>(send_buf);
    copy = std::make_shared<std::vector<std::byte>>(first, first + block_bytes);
    input = copy->data();
  }
  return start(
      info, [=] { DTL_MPI_CHECK(MPI_Allgather(input, count, type, recv_buf, count, type, comm)); },
      [=](MPI_Request* request) {
        DTL_MPI_CHECK(MPI_Iallgather(input, count, type, recv_buf, count, type, comm, request));
      },
      nullptr, copy);
}

}  // namespace dtl
