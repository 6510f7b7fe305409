// NcclComm: ncclCommInitRank with an id broadcast over MPI.
#include "harness/comm/nccl_comm.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "harness/comm/mpi_comm.h"
#include "harness/cuda/check.h"
#include "harness/cuda/device.h"

namespace dtl {

NcclComm::NcclComm(MPI_Comm comm, int device) : device_(device) {
  const auto [rank, size] = rank_and_size(comm);
  rank_ = rank;
  size_ = size;
  // Every rank selects its device before anything else: ncclCommInitRank binds
  // the communicator to the current device.
  DTL_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  if (rank == 0) DTL_NCCL_CHECK(ncclGetUniqueId(&id));
  DTL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  // Collective over all ranks: it returns only when every rank has joined.
  DTL_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
}

GpuPlacement gpu_placement(MPI_Comm comm) {
  GpuPlacement p;
  MPI_Comm local = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  const int rc_rank = MPI_Comm_rank(local, &p.local_rank);
  const int rc_size = MPI_Comm_size(local, &p.local_size);
  MPI_Comm_free(&local);
  DTL_MPI_CHECK(rc_rank);
  DTL_MPI_CHECK(rc_size);
  std::string why;
  p.gpus = cuda::gpu_count(&why);
  if (p.gpus > 0) p.device = p.local_rank % p.gpus;
  int version = 0;
  ncclGetVersion(&version);
  const char* shared = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const bool may_share = version >= 23000 && shared != nullptr && std::strcmp(shared, "1") == 0;
  std::string mine;
  if (p.gpus == 0) {
    mine = why;
  } else if (p.local_size > p.gpus && !may_share) {
    mine = std::to_string(p.local_size) + " ranks share " + std::to_string(p.gpus) +
           " GPU(s) on " + where_am_i() + ", and NCCL refuses two ranks on one GPU (NCCL " +
           std::to_string(version) + "; NCCL 2.30+ allows it with NCCL_MULTI_RANK_GPU_ENABLE=1)";
  }
  // Agree: everyone learns the first rank's reason, so every rank skips with the same text.
  const int bad_here = mine.empty() ? 0 : 1;
  int bad_anywhere = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&bad_here, &bad_anywhere, 1, MPI_INT, MPI_MAX, comm));
  p.nccl_ok = bad_anywhere == 0;
  if (!p.nccl_ok) {
    const auto [rank, size] = rank_and_size(comm);
    const int candidate = bad_here ? rank : size;
    int first = 0;
    DTL_MPI_CHECK(MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, comm));
    int length = rank == first ? static_cast<int>(mine.size()) : 0;
    DTL_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, comm));
    mine.resize(static_cast<std::size_t>(length));
    DTL_MPI_CHECK(MPI_Bcast(mine.data(), length, MPI_CHAR, first, comm));
    p.why_not = mine;
  }
  return p;
}

NcclComm::~NcclComm() { release(); }

void NcclComm::release() noexcept {
  if (comm_ == nullptr) return;
  // After a failed call the communicator may have work in flight that never
  // completes; ncclCommDestroy would wait for it, ncclCommAbort does not.
  if (failed_) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
  comm_ = nullptr;
}

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      size_(other.size_),
      device_(other.device_),
      failed_(other.failed_) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    size_ = other.size_;
    device_ = other.device_;
    failed_ = other.failed_;
  }
  return *this;
}

}  // namespace dtl
