// Lab 03, task G, given: the ring across processes on GPUs through CUDA IPC.
//
// How two processes share GPU memory without copying it through the host: the
// owner calls cudaIpcGetMemHandle on its cudaMalloc'd buffer and gets a 64-byte
// token. Any transport can carry the token (MPI_Allgather here); the peer calls
// cudaIpcOpenMemHandle on it and gets a device pointer, in its own address space,
// to the owner's memory. A kernel in the peer then reads (or writes) that memory
// as if it were its own: on one GPU it is its own; across GPUs the loads go over
// NVLink or PCIe (cudaIpcMemLazyEnablePeerAccess turns on peer access). This is
// how NCCL's P2P transport moves data inside a node.
//
//   rank r's buffer  <-- mapped by r-1 (its right neighbour's view) and r+1 (left)
//
// This file sets the ring up (export, exchange and map the handles), tears it
// down in the only safe order, and runs task G's loop (src/ipc_ring.h) with a
// CUDA stream: launch = the reduce-copy kernel, wait = cudaStreamSynchronize.
// Task G2's loop adds signal = cuStreamWriteValue64 on this rank's step flag and
// wait_for = cuStreamWaitValue64 on a neighbour's. The flag is a 64-bit word in
// the same allocation as the buffer, after it, so the one IPC mapping carries
// both. The two driver calls are looked up at run time
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda: the CPU tests'
// binaries load on machines without a driver.
//
// Every step that can fail on one rank alone is followed by agree(), so that all
// ranks throw together instead of some of them waiting forever in the next
// collective.
#if DTL_LAB_HAS_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/cuda/check.h"
#include "ipc_ring.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {
namespace {

// The driver's stream memory operations, looked up once per process (none where
// there is no driver); whether a device supports them is asked per ring.
struct StreamMemOps {
  PFN_cuStreamWriteValue64_v11070 write = nullptr;
  PFN_cuStreamWaitValue64_v11070 wait = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
};

const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps found_ops;
    void* write = nullptr;
    void* wait = nullptr;
    void* attribute = nullptr;
    const auto find = [](const char* name, void** fn, unsigned version) {
      cudaDriverEntryPointQueryResult found{};
      return cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &found) == cudaSuccess &&
             found == cudaDriverEntryPointSuccess;
    };
    if (find("cuStreamWriteValue64", &write, 11070) && find("cuStreamWaitValue64", &wait, 11070) &&
        find("cuDeviceGetAttribute", &attribute, 2000)) {
      found_ops.write = reinterpret_cast<PFN_cuStreamWriteValue64_v11070>(write);
      found_ops.wait = reinterpret_cast<PFN_cuStreamWaitValue64_v11070>(wait);
      found_ops.attribute = reinterpret_cast<PFN_cuDeviceGetAttribute_v2000>(attribute);
    }
    cudaGetLastError();  // a failed lookup is not an error of the next CUDA call
    return found_ops;
  }();
  return ops;
}

// Why `device` cannot run task G2's flags, or "" when it can.
std::string why_no_stream_mem_ops(int device) {
  const StreamMemOps& ops = stream_mem_ops();
  if (ops.write == nullptr) return "the CUDA driver does not provide cuStreamWriteValue64/cuStreamWaitValue64";
  int supported = 0;
  if (ops.attribute(&supported, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) != CUDA_SUCCESS ||
      !supported) {
    return "device " + std::to_string(device) + " does not support 64-bit stream memory operations";
  }
  return "";
}

void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) throw Error(std::string(what) + " failed (CUresult " + std::to_string(rc) + ")");
}

// Task G's stream on a GPU: kernels queued on a CUDA stream, and a host wait;
// task G2's step flags as stream memory operations on it.
template <GpuElement T>
struct CudaStreamOps {
  cudaStream_t stream;
  const StreamMemOps* mem = nullptr;  // task G2 only
  std::uint64_t* mine = nullptr;      // this rank's flag (device memory)
  std::uint64_t* left = nullptr;      // the neighbours' flags, through the IPC mappings
  std::uint64_t* right = nullptr;
  void launch(const ReduceCopyArgs<T>& args) { reduce_copy(args, stream); }
  void wait() { DTL_CUDA_CHECK(cudaStreamSynchronize(stream)); }
  // The write comes after a memory fence scoped to the stream: the kernels before
  // it are done and their writes visible first.
  void signal(std::uint64_t value) {
    check(mem->write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(mine), value,
                     CU_STREAM_WRITE_VALUE_DEFAULT),
          "cuStreamWriteValue64 (step flag)");
  }
  void wait_for(Neighbour side, std::uint64_t value) {
    check(mem->wait(reinterpret_cast<CUstream>(stream),
                    reinterpret_cast<CUdeviceptr>(side == Neighbour::kLeft ? left : right), value,
                    CU_STREAM_WAIT_VALUE_GEQ),
          "cuStreamWaitValue64 (a neighbour's step flag)");
  }
};

// A flag in a ring allocation of `count` elements of T (flag_offset()).
template <typename T>
std::uint64_t* flag_in(void* buffer, std::size_t count) {
  return reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(buffer) + flag_offset(count, sizeof(T)));
}

// Opens a peer's handle; returns the peer's buffer as seen from this process.
template <typename T>
T* open_peer(const cudaIpcMemHandle_t& handle) {
  void* peer = nullptr;
  DTL_CUDA_CHECK(cudaIpcOpenMemHandle(&peer, handle, cudaIpcMemLazyEnablePeerAccess));
  return static_cast<T*>(peer);
}

}  // namespace

template <GpuElement T>
IpcRing<T>::IpcRing(MPI_Comm comm, std::size_t count, int device) : comm_(comm), count_(count) {
  rank_ = comm_.rank();
  world_size_ = comm_.size();
  device_ = device;
  // Everything that can fail on one rank alone happens inside `try`; then the
  // ranks agree, so that they all throw together instead of some of them
  // waiting forever in the next collective.
  std::vector<cudaIpcMemHandle_t> handles(static_cast<std::size_t>(world_size_));
  std::string failure;
  try {
    DTL_CUDA_CHECK(cudaSetDevice(device));
    stream_.emplace();
    // The buffer, then the step flag (task G2), zero before any peer can read it.
    buf_ = cuda::DeviceBuffer(flag_offset(count, sizeof(T)) + sizeof(std::uint64_t));
    DTL_CUDA_CHECK(cudaMemset(flag_in<T>(buf_.data(), count), 0, sizeof(std::uint64_t)));
    DTL_CUDA_CHECK(cudaDeviceSynchronize());
    if (world_size_ > 1 && count > 0) {
      DTL_CUDA_CHECK(cudaIpcGetMemHandle(&handles[static_cast<std::size_t>(rank_)], buf_.data()));
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  agree(comm_, failure, "IpcRing: another rank failed to set up its buffer");
  if (world_size_ == 1 || count == 0) return;  // no peers to map

  // The handles travel as bytes: each rank's 64-byte token to every rank.
  DTL_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, handles.data(), sizeof(cudaIpcMemHandle_t),
                              MPI_BYTE, comm_));
  const int left = (rank_ + world_size_ - 1) % world_size_;
  const int right = (rank_ + 1) % world_size_;
  try {
    left_ = open_peer<T>(handles[static_cast<std::size_t>(left)]);
    // With P = 2 both neighbours are the same process: one mapping serves both
    // (opening it again would only add a reference to close).
    right_ = right == left ? left_ : open_peer<T>(handles[static_cast<std::size_t>(right)]);
  } catch (const Error& e) {
    failure = e.what();
    // The destructor will not run: close what was opened.
    if (left_ != nullptr) cudaIpcCloseMemHandle(left_);
    left_ = right_ = nullptr;
  }
  agree(comm_, failure, "IpcRing: another rank failed to open its neighbours' buffers");
}

template <GpuElement T>
IpcRing<T>::~IpcRing() {
  // Errors are ignored: destructors never throw. Close our mappings of the
  // neighbours' buffers; then wait until every rank has closed its mappings of
  // ours, and only then free it (buf_'s destructor, after this body): freeing
  // exported memory that a peer still has mapped is undefined behaviour. First
  // this rank's stream ends: task G2 returns with its kernels still queued, and
  // they read and write the mapped buffers (and, after a failed call, run on).
  if (left_ == nullptr) return;  // nothing was mapped (one rank, count 0, or a failed constructor)
  cudaStreamSynchronize(stream());
  if (right_ != left_) cudaIpcCloseMemHandle(right_);
  cudaIpcCloseMemHandle(left_);
  MPI_Barrier(comm_);
}

template <GpuElement T>
void IpcRing<T>::allreduce(bool fuse, IpcSync sync) {
  if (world_size_ == 1 || count_ == 0) return;
  DTL_CUDA_CHECK(cudaSetDevice(device_));
  CudaStreamOps<T> ops{stream()};
  if (sync == IpcSync::kHost) {
    detail::run_ipc_ring(comm_, rank_, world_size_, count_, fuse, data(), left_, right_, ops);
    return;
  }
  if (broken_) throw Error("IpcRing::allreduce(IpcSync::kFlags): an earlier call failed, and its flags released "
                           "every wait (kFlagAbandoned); make a new ring");
  if (calls_ == 0) {  // once per ring: every rank can, or all throw
    const std::string why_not = why_no_stream_mem_ops(device_);
    agree(comm_, why_not.empty() ? "" : "IpcRing::allreduce(IpcSync::kFlags): " + why_not,
          "IpcRing::allreduce(IpcSync::kFlags): another rank's GPU has no stream memory operations");
  }
  ops.mem = &stream_mem_ops();
  ops.mine = flag_in<T>(buf_.data(), count_);
  ops.left = flag_in<T>(left_, count_);
  ops.right = flag_in<T>(right_, count_);
  try {
    detail::run_ipc_ring_flags(comm_, rank_, world_size_, count_, fuse, data(), left_, right_, ops, calls_);
  } catch (const Error&) {
    broken_ = true;
    throw;
  }
  ++calls_;
}

template class IpcRing<float>;
template class IpcRing<__half>;
template class IpcRing<__nv_bfloat16>;

}  // namespace dtl::lab03
#endif  // DTL_LAB_HAS_CUDA
