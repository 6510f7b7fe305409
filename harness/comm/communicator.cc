// The Communicator interface: argument checks and descriptions shared by every
// backend, the Work handle (timeouts, errors in context, wait on destruction),
// and the communication thread.
#include "harness/comm/communicator.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

#include "harness/comm/mpi_comm.h"

namespace dtl {

// ---------------------------------------------------------------------------
// Names and sizes
// ---------------------------------------------------------------------------

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllgather: return "allgather";
  }
  return "?";
}

std::size_t OpInfo::total_bytes() const {
  const std::size_t block = count * dtype_size(dtype);
  const bool blocks = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllgather;
  return blocks ? block * static_cast<std::size_t>(world_size) : block;
}

double clock_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------
// Work
// ---------------------------------------------------------------------------

WorkImpl::WorkImpl(std::string description, double issue_seconds)
    : description_(std::move(description)),
      issue_(issue_seconds < 0 ? clock_seconds() : issue_seconds),
      start_(issue_) {}

Work::Work(std::unique_ptr<WorkImpl> impl, double timeout_seconds)
    : impl_(std::move(impl)), timeout_seconds_(timeout_seconds) {}

Work::~Work() {
  if (completed()) return;
  // A destructor cannot throw: say what went wrong and carry on. The buffers
  // of an operation that timed out here may still be written to later.
  try {
    wait();
  } catch (const std::exception& e) {
    std::cerr << "[dtl] a Work destroyed before its wait(): " << e.what() << std::endl;
  }
}

Work::Work(Work&& other) noexcept
    : impl_(std::move(other.impl_)), timeout_seconds_(other.timeout_seconds_), done_(other.done_) {}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    Work old(std::move(*this));  // waits for our pending operation on scope exit
    impl_ = std::move(other.impl_);
    timeout_seconds_ = other.timeout_seconds_;
    done_ = other.done_;
  }
  return *this;
}

// An error is thrown once; afterwards the handle counts as done, so that its
// destructor does not wait for (or report) it again.
bool Work::finish_or_throw(bool complete) {
  if (complete) done_ = true;
  return complete;
}

void Work::wait() { wait(timeout_seconds_); }

void Work::wait(double timeout_seconds) {
  if (completed()) return;
  if (wait_for(timeout_seconds > 0 ? timeout_seconds : 1e300)) return;
  std::ostringstream out;
  out.precision(1);
  out << "Work::wait: " << impl_->description() << " not complete after " << std::fixed << timeout_seconds
      << " s [" << where_am_i() << "]. Every rank must issue the same operations in the same order: "
      << "did a rank skip one, reorder two, or stop before issuing it?";
  throw TimeoutError(out.str());
}

bool Work::wait_for(double seconds) {
  if (completed()) return true;
  try {
    return finish_or_throw(impl_->wait_until(clock_seconds() + seconds));
  } catch (...) {
    done_ = true;
    rethrow_with_context(std::current_exception(), impl_->description());
  }
}

bool Work::test() {
  if (completed()) return true;
  try {
    return finish_or_throw(impl_->test());
  } catch (...) {
    done_ = true;
    rethrow_with_context(std::current_exception(), impl_->description());
  }
}

std::string Work::description() const { return impl_ ? impl_->description() : std::string(); }
double Work::issue_seconds() const noexcept { return impl_ ? impl_->issue_seconds() : 0.0; }
double Work::start_seconds() const noexcept { return impl_ ? impl_->start_seconds() : 0.0; }
double Work::end_seconds() const noexcept { return impl_ ? impl_->end_seconds() : 0.0; }

void rethrow_with_context(std::exception_ptr error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const MpiError& e) {
    throw MpiError(context + ": " + e.what(), e.code());
  } catch (const NcclError& e) {
    throw NcclError(context + ": " + e.what(), e.code());
  } catch (const CudaError& e) {
    throw CudaError(context + ": " + e.what(), e.code());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(context + ": " + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(context + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(context + ": " + e.what());
  }
}

// ---------------------------------------------------------------------------
// The communication thread
// ---------------------------------------------------------------------------

// One queued call: its completion is shared by the thread and the Work on the caller's side.
struct detail::CommTask : detail::Completion {
  std::function<void()> call;
};

void detail::Completion::complete(std::exception_ptr failure, double start_seconds) {
  {
    std::lock_guard lock(mutex);
    start = start_seconds;
    end = clock_seconds();
    error = std::move(failure);
    done = true;
  }
  cv.notify_all();
}

namespace {

// The caller's side of a Completion (a CommThread's call, a polled MPI request).
class CompletionWork final : public WorkImpl {
 public:
  CompletionWork(std::string description, std::shared_ptr<detail::Completion> completion)
      : WorkImpl(std::move(description)), completion_(std::move(completion)) {}

  bool test() override {
    std::lock_guard lock(completion_->mutex);
    return finished();
  }
  bool wait_until(double deadline_seconds) override {
    std::unique_lock lock(completion_->mutex);
    while (!completion_->done) {
      const double left = deadline_seconds - clock_seconds();
      if (left <= 0) return false;
      // Sleep on the condition variable: the caller's thread gives its core away.
      completion_->cv.wait_for(lock, std::chrono::duration<double>(std::min(left, 3600.0)));
    }
    return finished();
  }

 private:
  bool finished() {  // caller holds completion_->mutex
    if (!completion_->done) return false;
    if (completion_->start > 0.0) set_start(completion_->start);
    set_end(completion_->end);
    if (completion_->error) std::rethrow_exception(completion_->error);
    return true;
  }

  std::shared_ptr<detail::Completion> completion_;
};

}  // namespace

namespace detail {
std::unique_ptr<WorkImpl> completion_work(std::string description, std::shared_ptr<Completion> completion) {
  return std::make_unique<CompletionWork>(std::move(description), std::move(completion));
}
}  // namespace detail

CommThread::CommThread(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::unique_ptr<WorkImpl> CommThread::submit(std::string description, std::function<void()> call) {
  auto task = std::make_shared<detail::CommTask>();
  task->call = std::move(call);
  auto work = detail::completion_work(std::move(description), task);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return work;
}

std::size_t CommThread::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + running_;
}

void CommThread::run() {
  for (;;) {
    std::shared_ptr<detail::CommTask> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    const double start = clock_seconds();
    std::exception_ptr error;
    try {
      task->call();
    } catch (...) {
      error = std::current_exception();
    }
    task->complete(error, start);
    std::lock_guard lock(mutex_);
    --running_;
  }
}

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------

Communicator::Communicator() {
  if (const char* env = std::getenv("DTL_COMM_TIMEOUT"); env != nullptr && *env != '\0') {
    timeout_seconds_ = std::atof(env);
  }
}

OpInfo Communicator::describe(CollectiveKind kind, std::size_t count, DType dtype, ReduceOp op, int root) {
  OpInfo info;
  info.kind = kind;
  info.dtype = dtype;
  info.op = op;
  info.root = root;
  info.count = count;
  info.world_size = world_size();
  info.sequence = next_sequence_++;
  std::ostringstream out;
  out << collective_name(kind) << " #" << info.sequence << " (";
  if (kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter) out << reduce_op_name(op) << ", ";
  if (kind == CollectiveKind::kBroadcast) out << "root " << root << ", ";
  out << count << " x " << dtype_name(dtype);
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllgather) out << " per rank";
  out << " = " << format_bytes(info.total_bytes()) << ") on " << name();
  info.description = out.str();
  return info;
}

void Communicator::require_blocks_of(const char* function, const char* argument, std::size_t elements,
                                     std::size_t block) const {
  dtl::require_blocks(function, argument, elements, block, world_size());
}

namespace {
void require_buffer(const char* function, const char* argument, const void* buf, std::size_t count) {
  DTL_REQUIRE_ARG(buf != nullptr || count == 0, function, argument,
                  "is null but the count is " + std::to_string(count));
}
}  // namespace

Work Communicator::allreduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  require_buffer("allreduce", "buf", buf, count);
  require_op("allreduce", op, {ReduceOp::kSum, ReduceOp::kAvg});  // what data-parallel training needs
  const OpInfo info = describe(CollectiveKind::kAllreduce, count, dtype, op, 0);
  return Work(do_allreduce(buf, info), timeout_seconds_);
}

Work Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  require_buffer("broadcast", "buf", buf, count);
  require_rank("broadcast", "root", root, world_size());
  const OpInfo info = describe(CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  return Work(do_broadcast(buf, info), timeout_seconds_);
}

Work Communicator::reduce_scatter(const void* send_buf, void* recv_buf, std::size_t recv_count, DType dtype,
                                  ReduceOp op) {
  require_buffer("reduce_scatter", "send_buf", send_buf, recv_count);
  require_buffer("reduce_scatter", "recv_buf", recv_buf, recv_count);
  require_op("reduce_scatter", op, {ReduceOp::kSum, ReduceOp::kAvg});
  const OpInfo info = describe(CollectiveKind::kReduceScatter, recv_count, dtype, op, 0);
  return Work(do_reduce_scatter(send_buf, recv_buf, info), timeout_seconds_);
}

Work Communicator::allgather(const void* send_buf, void* recv_buf, std::size_t send_count, DType dtype) {
  require_buffer("allgather", "send_buf", send_buf, send_count);
  require_buffer("allgather", "recv_buf", recv_buf, send_count);
  const OpInfo info = describe(CollectiveKind::kAllgather, send_count, dtype, ReduceOp::kSum, 0);
  return Work(do_allgather(send_buf, recv_buf, info), timeout_seconds_);
}

// ---------------------------------------------------------------------------
// Helpers for backends
// ---------------------------------------------------------------------------

namespace {
template <typename T>
void divide(void* buf, std::size_t count, int world_size) {
  T* values = static_cast<T*>(buf);
  const T divisor = static_cast<T>(world_size);
  for (std::size_t i = 0; i < count; ++i) values[i] /= divisor;
}
}  // namespace

void divide_in_place(void* buf, std::size_t count, DType dtype, int world_size) {
  switch (dtype) {
    case DType::kF32: divide<float>(buf, count, world_size); return;
    case DType::kF64: divide<double>(buf, count, world_size); return;
    case DType::kI32: divide<std::int32_t>(buf, count, world_size); return;
    case DType::kF16:
    case DType::kBF16: break;
  }
  throw_invalid_argument("divide_in_place", "dtype", std::string("is ") + dtype_name(dtype) +
                                                         "; averaging 16-bit floats is not supported yet");
}

}  // namespace dtl
