// Lab 03: the vendor's collectives, NCCL, for the tests and the benchmark to
// compare the rings with. Given, not a task: one call each, on the caller's
// stream, asynchronous like every NCCL collective.
#if DTL_LAB_HAS_CUDA && DTL_HAVE_NCCL
#include "harness/comm/nccl_comm.h"
#include "lab03/ring_cuda.h"

namespace dtl::lab03 {

template <GpuElement T>
void nccl_allreduce(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t count, cudaStream_t stream) {
  DTL_NCCL_CHECK(ncclAllReduce(send_buf, recv_buf, count, nccl_datatype<T>(), ncclSum, comm.get(), stream));
}

template <GpuElement T>
void nccl_reduce_scatter(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t recv_count,
                         cudaStream_t stream) {
  DTL_NCCL_CHECK(ncclReduceScatter(send_buf, recv_buf, recv_count, nccl_datatype<T>(), ncclSum, comm.get(), stream));
}

template <GpuElement T>
void nccl_allgather(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t send_count,
                    cudaStream_t stream) {
  DTL_NCCL_CHECK(ncclAllGather(send_buf, recv_buf, send_count, nccl_datatype<T>(), comm.get(), stream));
}

#define DTL_LAB03_NCCL(T)                                                                          \
  template void nccl_allreduce<T>(const NcclComm&, const T*, T*, std::size_t, cudaStream_t);      \
  template void nccl_reduce_scatter<T>(const NcclComm&, const T*, T*, std::size_t, cudaStream_t); \
  template void nccl_allgather<T>(const NcclComm&, const T*, T*, std::size_t, cudaStream_t);
DTL_LAB03_NCCL(float)
DTL_LAB03_NCCL(__half)
DTL_LAB03_NCCL(__nv_bfloat16)
#undef DTL_LAB03_NCCL

}  // namespace dtl::lab03
#endif
