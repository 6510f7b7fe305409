// Lab 04, given (not a task; compiled into both builds): your lab-03 ring as a
// Communicator backend, and backends by name.
//
// What this file teaches: an adapter. The reducer speaks only dtl::Communicator
// (asynchronous operations with Work handles); lab 03's ring is a set of
// *blocking* functions over an MPI communicator. A communication thread
// (dtl::CommThread, FIFO) turns blocking calls into asynchronous ones: issue
// returns at once, the thread runs the ring while backward computes, and wait()
// returns when the thread is done. See Note [Why a communication thread] in
// harness/comm/mpi_communicator.h for why a thread (and MPI_THREAD_MULTIPLE).
//
// The thread works on its own duplicate of the parent communicator, so the
// ring's messages (tag kRingTag) never match anything the main thread sends.
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "lab03/ring.h"
#include "lab04/ddp.h"

#if DTL_HAVE_NCCL
#include "harness/comm/nccl_communicator.h"
#endif

namespace dtl::lab04 {
namespace {

constexpr int kRingTag = 404;

lab03::Op ring_op(ReduceOp op) { return op == ReduceOp::kAvg ? lab03::Op::kAvg : lab03::Op::kSum; }

// Runs `fn` with the buffer typed as the OpInfo's dtype (f32, f64, i32).
template <typename Fn>
void typed(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(float{}); return;
    case DType::kF64: fn(double{}); return;
    case DType::kI32: fn(std::int32_t{}); return;
    default:
      throw InvalidArgument(std::string("RingCommunicator: ") + what + " of " + dtype_name(dtype) +
                            " is not supported (lab 03's ring takes f32, f64 and i32)");
  }
}

// Lab 03 not done yet is the likely failure here: say which lab to finish (and
// keep the type, which the tests and the rubric rely on). Other errors pass as they are.
template <typename Call>
void run_ring(Call&& call) {
  try {
    call();
  } catch (const NotImplemented& e) {
    throw NotImplemented(std::string("lab 03's ring, which the ring backend of lab 04 runs (finish lab 03 first): ") +
                         e.what());
  }
}

}  // namespace

RingCommunicator::RingCommunicator(MPI_Comm parent) {
  if (!MpiCommunicator::thread_multiple_available()) {
    throw Error("RingCommunicator: needs MPI_THREAD_MULTIPLE (its thread calls MPI while the main thread may too)");
  }
  DTL_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  DTL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DTL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  thread_ = std::make_unique<CommThread>("lab03-ring");
}

RingCommunicator::~RingCommunicator() {
  thread_.reset();  // runs what is queued (every rank issued it), then joins
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<WorkImpl> RingCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  MPI_Comm comm = comm_;
  typed(info.dtype, "allreduce", [](auto) {});  // refuse unsupported types now, not on the thread
  return thread_->submit(info.description, [comm, buf, info] {
    typed(info.dtype, "allreduce", [&](auto zero) {
      using T = decltype(zero);
      run_ring([&] { lab03::allreduce_ring<T>(comm, {static_cast<T*>(buf), info.count}, ring_op(info.op), kRingTag); });
    });
  });
}

std::unique_ptr<WorkImpl> RingCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  MPI_Comm comm = comm_;
  const int bytes = to_mpi_count(info.count * dtype_size(info.dtype), "RingCommunicator::broadcast", "buf");
  return thread_->submit(info.description, [comm, buf, bytes, info] {
    DTL_MPI_CHECK(MPI_Bcast(buf, bytes, MPI_BYTE, info.root, comm));
  });
}

std::unique_ptr<WorkImpl> RingCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                              const OpInfo& info) {
  MPI_Comm comm = comm_;
  const int rank = rank_, size = size_;
  typed(info.dtype, "reduce_scatter", [](auto) {});
  return thread_->submit(info.description, [comm, send_buf, recv_buf, info, rank, size] {
    typed(info.dtype, "reduce_scatter", [&](auto zero) {
      using T = decltype(zero);
      // The ring reduces in place: work on a copy, whose chunk `rank` is block `rank`.
      std::vector<T> scratch(static_cast<const T*>(send_buf), static_cast<const T*>(send_buf) + size * info.count);
      run_ring([&] { lab03::reduce_scatter_ring<T>(comm, std::span<T>(scratch), ring_op(info.op), kRingTag); });
      std::memcpy(recv_buf, scratch.data() + rank * info.count, info.count * sizeof(T));
    });
  });
}

std::unique_ptr<WorkImpl> RingCommunicator::do_allgather(const void* send_buf, void* recv_buf, const OpInfo& info) {
  MPI_Comm comm = comm_;
  const int rank = rank_, size = size_;
  typed(info.dtype, "allgather", [](auto) {});
  return thread_->submit(info.description, [comm, send_buf, recv_buf, info, rank, size] {
    typed(info.dtype, "allgather", [&](auto zero) {
      using T = decltype(zero);
      T* out = static_cast<T*>(recv_buf);
      if (static_cast<const T*>(send_buf) != out + rank * info.count) {
        std::memmove(out + rank * info.count, send_buf, info.count * sizeof(T));
      }
      run_ring([&] { lab03::allgather_ring<T>(comm, std::span<T>(out, size * info.count), kRingTag); });
    });
  });
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm parent) {
  if (name == "mpi-thread") return std::make_unique<MpiCommunicator>(parent, MpiMode::kThread);
  if (name == "mpi-nonblocking") return std::make_unique<MpiCommunicator>(parent, MpiMode::kNonblocking);
  if (name == "ring") return std::make_unique<RingCommunicator>(parent);
  if (name == "nccl") {
    // Device buffers only: lab 04's model computes on the CPU, so this backend is
    // for the GPU labs. NCCL needs one GPU per rank (NcclCommunicator says why not).
#if DTL_HAVE_NCCL
    return std::make_unique<NcclCommunicator>(parent);
#else
    throw InvalidArgument("make_communicator: backend 'nccl': built without NCCL (it needs nvcc and NCCL at "
                          "configure time; see cmake/README.md)");
#endif
  }
  const std::string prefix = "emulated:";
  if (name.rfind(prefix, 0) == 0) {
    // Parse first (the same on every rank), so a bad name throws before any collective.
    LinkModel link = parse_link(name.substr(prefix.size()));
    return std::make_unique<EmulatedCommunicator>(std::make_unique<MpiCommunicator>(parent, MpiMode::kThread),
                                                  std::move(link));
  }
  throw InvalidArgument("make_communicator: unknown backend '" + name +
                        "' (mpi-thread, mpi-nonblocking, ring, nccl, emulated:<link> such as emulated:10GbE)");
}

}  // namespace dtl::lab04
