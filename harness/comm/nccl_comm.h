/// @file
/// @brief dtl::NcclComm: an NCCL communicator created from an MPI communicator,
/// and the NCCL datatype of an element type.
///
/// NCCL has no launcher of its own: every rank must call ncclCommInitRank with
/// the same ncclUniqueId, which one rank creates. MPI is how the others get it
/// (rank 0 calls ncclGetUniqueId, MPI_Bcast sends the 128 bytes). The NCCL
/// communicator then has the MPI communicator's ranks and size, one GPU per rank.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "harness/comm/nccl_check.h"

namespace dtl {

/// @brief An NCCL communicator over the ranks of an MPI communicator: move-only;
/// the destructor destroys it (ncclCommDestroy), or aborts it (ncclCommAbort) when
/// an NCCL call on it has failed, so that a broken communicator never blocks.
///
/// One rank per GPU: NCCL refuses two ranks of one communicator on one GPU
/// (ncclInvalidUsage) unless NCCL 2.30+ runs with NCCL_MULTI_RANK_GPU_ENABLE=1.
class NcclComm {
 public:
  /// @brief An empty handle (no communicator).
  NcclComm() noexcept = default;
  /// @brief Creates the NCCL communicator (collective over `comm`): rank 0 makes
  /// the unique id, MPI_Bcast shares it, every rank calls ncclCommInitRank on
  /// `device`, which becomes the current device.
  /// @param[in] comm the MPI communicator whose ranks form the NCCL communicator.
  /// @param[in] device the CUDA device this rank uses (e.g. rank % gpu_count()).
  /// @throws MpiError if the broadcast of the id fails.
  /// @throws CudaError if `device` cannot be selected.
  /// @throws NcclError if NCCL refuses (for example two ranks on one GPU).
  NcclComm(MPI_Comm comm, int device);
  /// @brief Destroys (or, after an error, aborts) the communicator; never throws.
  ~NcclComm();
  /// @brief Takes over `other`'s communicator; `other` becomes empty.
  /// @param[in,out] other the communicator to move from.
  NcclComm(NcclComm&& other) noexcept;
  /// @brief Releases ours, then takes over `other`'s communicator.
  /// @param[in,out] other the communicator to move from.
  /// @return *this.
  NcclComm& operator=(NcclComm&& other) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  /// @return the handle (still owned by this object; null when empty).
  ncclComm_t get() const noexcept { return comm_; }
  /// @return this rank in the communicator.
  int rank() const noexcept { return rank_; }
  /// @return the number of ranks.
  int size() const noexcept { return size_; }
  /// @return the CUDA device this rank's communicator lives on.
  int device() const noexcept { return device_; }
  /// @brief Marks the communicator as broken, so that the destructor aborts it
  /// instead of destroying it (ncclCommDestroy may wait for work that never ends).
  void mark_failed() noexcept { failed_ = true; }

 private:
  void release() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = -1;
  bool failed_ = false;
};

/// @brief Where this rank's GPU work goes, and whether NCCL can run the communicator here.
struct GpuPlacement {
  int device = -1;         ///< the device to use: the rank on its host modulo the host's GPUs (-1: none)
  int local_rank = 0;      ///< this rank among the ranks on its host
  int local_size = 1;      ///< the ranks on this host
  int gpus = 0;            ///< the GPUs on this host
  bool nccl_ok = false;    ///< whether every rank has a GPU of its own (or NCCL may share one)
  std::string why_not;     ///< when !nccl_ok, the reason, the same on every rank
};

/// @brief Decides, together, where each rank's GPU work goes and whether NCCL can
/// run a communicator of all of `comm`'s ranks (collective over `comm`).
///
/// NCCL needs one GPU per rank: before NCCL 2.30, and without
/// NCCL_MULTI_RANK_GPU_ENABLE=1 from 2.30 on, ncclCommInitRank fails with
/// ncclInvalidUsage when two ranks share a GPU. `nccl_ok` holds only when it
/// holds on every rank, so tests can skip together on it.
/// @param[in] comm the communicator NCCL would span.
/// @return the placement; `why_not` names the host with too few GPUs.
/// @throws MpiError if the MPI calls that count the ranks per host fail.
GpuPlacement gpu_placement(MPI_Comm comm);

/// @brief The NCCL datatype of an element type.
/// @tparam T float, double, __half, __nv_bfloat16, std::int32_t or std::int64_t.
/// @return e.g. ncclFloat32 for float.
template <typename T>
constexpr ncclDataType_t nccl_datatype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else static_assert(sizeof(T) == 0, "nccl_datatype: no NCCL datatype for this type");
}

}  // namespace dtl
