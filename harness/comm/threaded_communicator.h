/// @file
/// @brief A Communicator from blocking collective functions, run one at a time
/// on a communication thread: how a lab's own collective (the lab-03 ring)
/// becomes a backend for DDP, FSDP or the emulator, without the harness
/// depending on lab code.
///
///     dtl::BlockingCollectives ops;
///     ops.allreduce = [](MPI_Comm comm, void* buf, std::size_t count, dtl::DType dtype, dtl::ReduceOp op) {
///       // e.g. dtl::lab03::allreduce_ring(comm, std::span(static_cast<float*>(buf), count), ..., tag)
///     };
///     dtl::ThreadedCommunicator ring(MPI_COMM_WORLD, "lab03-ring", ops);
///
/// Each function receives the communicator's own duplicate of `parent` (so its
/// messages never match the caller's) and runs on the communication thread, in
/// issue order. See Note [Why a communication thread] in mpi_communicator.h.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"

namespace dtl {

/// @brief The blocking functions behind a ThreadedCommunicator; any may be left empty
/// (issuing that collective then throws InvalidArgument naming it).
struct BlockingCollectives {
  /// In-place allreduce of `count` elements of `dtype` on `comm`.
  std::function<void(MPI_Comm comm, void* buf, std::size_t count, DType dtype, ReduceOp op)> allreduce;
  /// In-place broadcast from `root`.
  std::function<void(MPI_Comm comm, void* buf, std::size_t count, DType dtype, int root)> broadcast;
  /// Reduce-scatter of P blocks of `recv_count` (layout of Communicator::reduce_scatter()).
  std::function<void(MPI_Comm comm, const void* send_buf, void* recv_buf, std::size_t recv_count, DType dtype,
                     ReduceOp op)>
      reduce_scatter;
  /// Allgather of P blocks of `send_count` (layout of Communicator::allgather()).
  std::function<void(MPI_Comm comm, const void* send_buf, void* recv_buf, std::size_t send_count, DType dtype)>
      allgather;
  /// The element types the functions take (empty: any). Another type is refused
  /// when the operation is issued (InvalidArgument naming the collective, the type
  /// and these), not later on the thread.
  std::vector<DType> dtypes;
};

/// @brief dtl::Communicator over blocking collective functions run on a CommThread.
class ThreadedCommunicator final : public Communicator {
 public:
  /// @brief Duplicates `parent` (collective over `parent`) and starts the thread.
  /// @param[in] parent the communicator to duplicate.
  /// @param[in] name the backend's name, e.g. "lab03-ring".
  /// @param[in] ops the blocking functions.
  /// @throws Error when MPI was initialized below MPI_THREAD_MULTIPLE (checked before the duplication).
  /// @throws MpiError if MPI_Comm_dup fails.
  ThreadedCommunicator(MPI_Comm parent, std::string name, BlockingCollectives ops);
  /// @brief Completes what is queued, stops the thread, frees the communicator.
  ~ThreadedCommunicator() override;

  /// @return this process's rank.
  int rank() const override { return comm_.rank(); }
  /// @return the number of ranks.
  int world_size() const override { return comm_.size(); }
  /// @return the name given to the constructor.
  std::string name() const override { return name_; }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  std::string name_;
  BlockingCollectives ops_;
  Comm comm_;
  std::unique_ptr<CommThread> thread_;
};

}  // namespace dtl
