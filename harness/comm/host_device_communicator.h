/// @file
/// @brief HostDeviceCommunicator: one Communicator over two backends, host buffers
/// to one (Open MPI) and device buffers to the other (NCCL), as PyTorch's
/// `init_process_group(backend="cpu:gloo,cuda:nccl")`. See Note [Host and device buffers].
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "harness/comm/communicator.h"

namespace dtl {

// Note [Host and device buffers]
// ------------------------------
// Lab 04's code moves two kinds of data: the model's fingerprint in
// check_model_agreement() (a few numbers in a std::vector, on the host) and the
// gradients (on the GPU once the model is there). NCCL takes device buffers only,
// and an MPI built without CUDA support takes host buffers only. Rather than two
// communicators in the lab's API, or a copy to the GPU and back of every small
// host exchange, one Communicator routes each operation by where its buffers are,
// as PyTorch's process groups do with a backend per device type. Routing is by
// the buffer, and every rank's buffers of one operation live in the same place
// (the same code built them), so every rank picks the same backend, and each
// backend sees its own operations in the same order on every rank: the contract
// of communicator.h holds for each of them.

/// @brief Routes each collective to `host` or `device` by where its buffers live.
///
/// Both backends must span the same ranks, in the same order. An operation whose
/// buffers are some on the host and some on a device throws InvalidArgument. The
/// Works come from the backend that ran the operation; the timeout is each
/// backend's own.
class HostDeviceCommunicator final : public Communicator {
 public:
  /// @brief Whether a pointer is device memory (dtl::cuda::is_device_pointer() on a GPU).
  using IsDevice = std::function<bool(const void*)>;

  /// @brief Takes both backends.
  /// @param[in] host the backend for host buffers (e.g. MpiCommunicator).
  /// @param[in] device the backend for device buffers (e.g. NcclCommunicator).
  /// @param[in] is_device tells device pointers from host ones.
  /// @throws InvalidArgument if a backend is null or the two disagree on rank or world size.
  HostDeviceCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device,
                         IsDevice is_device);

  /// @return the rank (the same in both backends).
  int rank() const override { return host_->rank(); }
  /// @return the world size (the same in both backends).
  int world_size() const override { return host_->world_size(); }
  /// @return "cpu:HOST,cuda:DEVICE", e.g. "cpu:mpi-thread,cuda:nccl".
  std::string name() const override { return "cpu:" + host_->name() + ",cuda:" + device_->name(); }

  /// @return the backend of host buffers.
  Communicator& host() noexcept { return *host_; }
  /// @return the backend of device buffers.
  Communicator& device() noexcept { return *device_; }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  Communicator& route(const char* function, const void* a, const void* b, const OpInfo& info) const;

  std::unique_ptr<Communicator> host_;
  std::unique_ptr<Communicator> device_;
  IsDevice is_device_;
};

}  // namespace dtl
