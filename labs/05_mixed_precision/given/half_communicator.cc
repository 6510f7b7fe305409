// Lab 05, given (not a task; compiled into both builds): Open MPI with 16-bit
// sums, and backends by name.
//
// What this file teaches: how a library reduces a type it does not know. MPI has
// no fp16 or bf16 type and no sum for them, but it lets a program register its
// own reduction (MPI_Op_create): a function f(in, inout, len, type) that does
// inout[i] = in[i] op inout[i]. MPI's own algorithms (recursive doubling, ring,
// tree — whichever it picks) then call that function at every step, on 16-bit
// elements that travel as MPI_UINT16_T: half the bytes of fp32. The function
// here is your reduce_half_sum(), so every addition of the allreduce is done in
// fp32 and stored in 16 bits, as NCCL does on a GPU.
//
// The ops are declared commutative: a + b and b + a round to the same 16 bits,
// so MPI may combine in any order it likes (the result may still depend on that
// order, since the additions are not associative — but it is the same on every
// rank, because an allreduce hands every rank the same final buffer).
//
// Blocking MPI calls on a communication thread (CommThread, FIFO), on a
// duplicate of the parent communicator: See Note [Why a communication thread]
// in harness/comm/mpi_communicator.h.
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "harness/comm/backends.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "lab05/mixed.h"

namespace dtl::lab05 {
namespace {

// The MPI_User_function of each 16-bit type: inout = in + inout, via reduce_half_sum().
// MPI calls it from the communication thread; an exception must not cross into
// MPI's C code, so it is kept and rethrown once the MPI call has returned.
thread_local std::exception_ptr g_op_error;

void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  try {
    reduce_half_sum(DType::kF16, in, inout, static_cast<std::size_t>(*len));
  } catch (...) {
    if (!g_op_error) g_op_error = std::current_exception();
  }
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  try {
    reduce_half_sum(DType::kBF16, in, inout, static_cast<std::size_t>(*len));
  } catch (...) {
    if (!g_op_error) g_op_error = std::current_exception();
  }
}

// The MPI type and op of an allreduce or reduce_scatter of `info`.
struct MpiReduction {
  MPI_Datatype type;
  MPI_Op op;
};

MpiReduction reduction(const OpInfo& info, MPI_Op f16_op, MPI_Op bf16_op) {
  switch (info.dtype) {
    case DType::kF32: return {MPI_FLOAT, MPI_SUM};
    case DType::kF64: return {MPI_DOUBLE, MPI_SUM};
    case DType::kI32: return {MPI_INT32_T, MPI_SUM};
    case DType::kF16: return {MPI_UINT16_T, f16_op};
    case DType::kBF16: return {MPI_UINT16_T, bf16_op};
  }
  return {MPI_BYTE, MPI_OP_NULL};
}

// Refuses, at issue time (the same on every rank), what this backend cannot do.
void check_reduction(const OpInfo& info, const char* function) {
  if ((info.dtype == DType::kF16 || info.dtype == DType::kBF16) && info.op != ReduceOp::kSum) {
    throw_invalid_argument(function, "op",
                           std::string("is ") + reduce_op_name(info.op) + " on " + dtype_name(info.dtype) +
                               "; 16-bit buffers take kSum only: divide where allreduce_mean_half() says");
  }
}

// Runs a blocking MPI reduction, then rethrows what the user op threw (your
// reduce_half_sum(), e.g. NotImplemented), naming lab 05's function.
template <typename Call>
void run_reduction(Call&& call) {
  g_op_error = nullptr;
  call();
  if (g_op_error) {
    std::exception_ptr error = std::exchange(g_op_error, nullptr);
    std::rethrow_exception(error);
  }
}

}  // namespace

HalfSumCommunicator::HalfSumCommunicator(MPI_Comm parent) {
  if (!MpiCommunicator::thread_multiple_available()) {
    throw Error("HalfSumCommunicator: needs MPI_THREAD_MULTIPLE (its thread calls MPI while the main thread may too)");
  }
  DTL_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  DTL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DTL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  DTL_MPI_CHECK(MPI_Op_create(&f16_sum, /*commute=*/1, &f16_sum_));
  DTL_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_));
  thread_ = std::make_unique<CommThread>("mpi-half");
}

HalfSumCommunicator::~HalfSumCommunicator() {
  thread_.reset();  // runs what is queued (every rank issued it), then joins
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // a communicator that outlived MPI (a static in a benchmark): MPI freed everything
  if (f16_sum_ != MPI_OP_NULL) MPI_Op_free(&f16_sum_);
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// do_allreduce: MPI_Allreduce on the thread (16-bit: the reduce_half_sum op).
std::unique_ptr<WorkImpl> HalfSumCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  check_reduction(info, "HalfSumCommunicator::allreduce");
  const MpiReduction r = reduction(info, f16_sum_, bf16_sum_);
  const int count = to_mpi_count(info.count, "HalfSumCommunicator::allreduce", "count");
  MPI_Comm comm = comm_;
  const int size = size_;
  return thread_->submit(info.description, [comm, buf, r, count, info, size] {
    run_reduction([&] { DTL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count, r.type, r.op, comm)); });
    if (info.op == ReduceOp::kAvg) divide_in_place(buf, info.count, info.dtype, size);
  });
}

// do_broadcast: MPI_Bcast of the bytes on the thread.
std::unique_ptr<WorkImpl> HalfSumCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  const int bytes = to_mpi_count(info.count * dtype_size(info.dtype), "HalfSumCommunicator::broadcast", "buf");
  MPI_Comm comm = comm_;
  return thread_->submit(info.description,
                         [comm, buf, bytes, info] { DTL_MPI_CHECK(MPI_Bcast(buf, bytes, MPI_BYTE, info.root, comm)); });
}

// do_reduce_scatter: MPI_Reduce_scatter_block on the thread (16-bit: the reduce_half_sum op).
std::unique_ptr<WorkImpl> HalfSumCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                 const OpInfo& info) {
  check_reduction(info, "HalfSumCommunicator::reduce_scatter");
  const MpiReduction r = reduction(info, f16_sum_, bf16_sum_);
  const int count = to_mpi_count(info.count, "HalfSumCommunicator::reduce_scatter", "recv_count");
  MPI_Comm comm = comm_;
  const int rank = rank_, size = size_;
  return thread_->submit(info.description, [comm, send_buf, recv_buf, r, count, info, rank, size] {
    const std::size_t bytes = info.count * dtype_size(info.dtype);
    const bool in_place = static_cast<const char*>(send_buf) + rank * bytes == recv_buf;
    run_reduction([&] {
      DTL_MPI_CHECK(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send_buf,
                                             in_place ? const_cast<void*>(send_buf) : recv_buf, count, r.type, r.op,
                                             comm));
    });
    if (in_place && rank != 0) std::memmove(recv_buf, send_buf, bytes);  // MPI_IN_PLACE leaves block r at the start
    if (info.op == ReduceOp::kAvg) divide_in_place(recv_buf, info.count, info.dtype, size);
  });
}

// do_allgather: MPI_Allgather of the bytes on the thread.
std::unique_ptr<WorkImpl> HalfSumCommunicator::do_allgather(const void* send_buf, void* recv_buf,
                                                            const OpInfo& info) {
  const int bytes = to_mpi_count(info.count * dtype_size(info.dtype), "HalfSumCommunicator::allgather", "send_buf");
  MPI_Comm comm = comm_;
  const int rank = rank_;
  return thread_->submit(info.description, [comm, send_buf, recv_buf, bytes, rank] {
    const bool in_place = static_cast<const char*>(recv_buf) + rank * bytes == send_buf;
    DTL_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send_buf, bytes, MPI_BYTE, recv_buf, bytes, MPI_BYTE, comm));
  });
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm parent) {
  // Lab 05's own backend is mpi-half; emulated links run over it.
  const OwnBackends half = [](const std::string& own, MPI_Comm comm) -> std::unique_ptr<Communicator> {
    return own == "mpi-half" ? std::make_unique<HalfSumCommunicator>(comm) : nullptr;
  };
  return make_backend(name, parent, half, "mpi-half", "mpi-half, nccl, emulated:<link> such as emulated:10GbE");
}

}  // namespace dtl::lab05
