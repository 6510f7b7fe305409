// Lab 04, given (not a task; compiled into both builds): your lab-03 ring as a
// Communicator backend, and backends by name.
//
// What this file teaches: an adapter. The reducer speaks only dtl::Communicator
// (asynchronous operations with Work handles); lab 03's ring is a set of
// *blocking* functions over an MPI communicator. dtl::ThreadedCommunicator
// (harness/comm/threaded_communicator.h) turns blocking functions into an
// asynchronous backend: issue returns at once, its communication thread runs the
// ring while backward computes, and wait() returns when the thread is done. See
// Note [Why a communication thread] in harness/comm/mpi_communicator.h for why a
// thread (and MPI_THREAD_MULTIPLE). All this file adds is the four functions.
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

#include "harness/comm/backends.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/threaded_communicator.h"
#include "harness/error.h"
#include "lab03/ring.h"
#include "lab04/ddp.h"

namespace dtl::lab04 {
namespace {

constexpr int kRingTag = 404;

// Runs `fn` with the buffer typed as `dtype` (f32, f64, i32: the types the
// backend declares, so ThreadedCommunicator refused any other when it was issued).
template <typename Fn>
void typed(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(float{}); return;
    case DType::kF64: fn(double{}); return;
    default: fn(std::int32_t{}); return;
  }
}

// Lab 03 not done yet is the likely failure here: say which lab to finish (and
// keep the type, which the tests and the rubric rely on). Other errors pass as they are.
template <typename Call>
void run_ring(Call&& call) {
  try {
    call();
  } catch (const NotImplemented& e) {
    // e.what() is "FUNCTION is not implemented yet (...) [rank ...]": name the function
    // once, so that the new message does not repeat the ending.
    const std::string what = e.what();
    const std::string function = what.substr(0, what.find(" is not implemented yet"));
    throw NotImplemented("lab 03's " + function + " (the ring backend of lab 04 runs it: finish lab 03 first)");
  }
}

}  // namespace

std::unique_ptr<Communicator> make_ring_communicator(MPI_Comm parent) {
  BlockingCollectives ops;
  ops.dtypes = {DType::kF32, DType::kF64, DType::kI32};
  ops.allreduce = [](MPI_Comm comm, void* buf, std::size_t count, DType dtype, ReduceOp op) {
    typed(dtype, [&](auto zero) {
      using T = decltype(zero);
      run_ring([&] { lab03::allreduce_ring<T>(comm, {static_cast<T*>(buf), count}, op, kRingTag); });
    });
  };
  ops.broadcast = [](MPI_Comm comm, void* buf, std::size_t count, DType dtype, int root) {
    const int bytes = to_mpi_count(count * dtype_size(dtype), "lab03-ring broadcast", "buf");
    DTL_MPI_CHECK(MPI_Bcast(buf, bytes, MPI_BYTE, root, comm));
  };
  ops.reduce_scatter = [](MPI_Comm comm, const void* send_buf, void* recv_buf, std::size_t recv_count, DType dtype,
                          ReduceOp op) {
    typed(dtype, [&](auto zero) {
      using T = decltype(zero);
      const auto [rank, size] = rank_and_size(comm);
      // The ring reduces in place: work on a copy, whose chunk `rank` is block `rank`.
      std::vector<T> scratch(static_cast<const T*>(send_buf), static_cast<const T*>(send_buf) + size * recv_count);
      run_ring([&] { lab03::reduce_scatter_ring<T>(comm, std::span<T>(scratch), op, kRingTag); });
      std::memcpy(recv_buf, scratch.data() + rank * recv_count, recv_count * sizeof(T));
    });
  };
  ops.allgather = [](MPI_Comm comm, const void* send_buf, void* recv_buf, std::size_t send_count, DType dtype) {
    typed(dtype, [&](auto zero) {
      using T = decltype(zero);
      const auto [rank, size] = rank_and_size(comm);
      T* out = static_cast<T*>(recv_buf);
      if (static_cast<const T*>(send_buf) != out + rank * send_count) {
        std::memmove(out + rank * send_count, send_buf, send_count * sizeof(T));
      }
      run_ring([&] { lab03::allgather_ring<T>(comm, std::span<T>(out, size * send_count), kRingTag); });
    });
  };
  return std::make_unique<ThreadedCommunicator>(parent, "lab03-ring", std::move(ops));
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm parent) {
  // Lab 04's own backend is the ring; NCCL is for device buffers only (lab 04's
  // model computes on the CPU, so the reducer does not use it: it is for the GPU labs).
  const OwnBackends ring = [](const std::string& own, MPI_Comm comm) -> std::unique_ptr<Communicator> {
    return own == "ring" ? make_ring_communicator(comm) : nullptr;
  };
  return make_backend(name, parent, ring, "mpi-thread",
                      "mpi-thread, mpi-nonblocking, ring, nccl, emulated:<link> such as emulated:10GbE");
}

}  // namespace dtl::lab04
