/// @file
/// @brief Lab 03, part 2 — the ring allreduce on GPUs: the API you implement in src/.
///
/// Part 1 moved chunks between processes with MPI. Here the same ring (the same
/// ring_step() table, the same chunk_begin()/chunk_count() layout) runs as CUDA
/// kernels:
///
///   reduce-copy      one kernel does one step's work for one rank: dst = a + b
///                    (reduce) or dst = a (copy), with 16-byte vector loads; its
///                    fused form also writes the result into the right neighbour's
///                    buffer, folding the last reduce-scatter step into the first
///                    allgather step (NCCL's "recvReduceCopySend")
///   virtual ring     P buffers on one GPU, one process: P "virtual ranks", one
///                    kernel launch per ring step
///   IPC ring         one buffer per process; each process maps its neighbours'
///                    buffers through CUDA IPC handles exchanged over MPI and reads
///                    (pulls) from its left neighbour's buffer directly
///   NCCL             the vendor's allreduce, reduce-scatter and allgather, for comparison
///
/// Files under src/ (yours):
///   - reduce_copy.cuh     the per-thread work of the reduce-copy (__host__ __device__,
///                         so the CPU tests run it too): head, 16-byte vectors, tail
///   - ring_job.cc         ring_job(): one rank's reduce-copy at one step
///   - virtual_ring.h      the ring loop shared by the host and the GPU virtual rings
///   - ipc_ring.h          the ring loops across processes, shared by IpcRing (GPU) and
///                         IpcRingHost (CPU): with host waits and agreements (task G),
///                         and with step flags the streams signal and wait on (task G2)
///
/// Files under given/ (handed to you, compiled into your build, never submitted):
///   - reduce_copy_pack.cuh fp32 accumulation, 16-byte packs, the one-element reduce-copy
///   - reduce_copy.cu      the kernels that wrap reduce_copy.cuh, and the copy kernel (the roofline)
///   - reduce_copy_host.cc the same work on the host: the CPU tests' way in
///   - virtual_ring.cu     virtual_ring_allreduce(): the loop of virtual_ring.h, launching kernels
///   - virtual_ring_graph.cu VirtualRingGraph: that loop captured once, replayed with one launch
///   - ipc_ring.cc         IpcRing: CUDA IPC handles, peers, and the loop on a CUDA stream
///   - ipc_ring_host.cc    IpcRingHost: an MPI shared-memory window and a host "stream"
///   - nccl_collectives.cc the NCCL calls
///
/// Pull model. At each step a rank *receives*: it reads the chunk from its left
/// neighbour's buffer and writes its own. See ring_job() for why one step's
/// writes never touch what another rank reads in that step.
///
/// Element types: float, __half and __nv_bfloat16. Half-precision values are
/// added in fp32 and rounded once per reduce-copy, as NCCL does.
///
/// Include this header only where CUDA is built (DTL_LAB_HAS_CUDA): it needs the
/// CUDA headers. Do not edit it: the grader compiles your src/ against its own copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/cuda/device.h"
#include "harness/cuda/stream.h"
#include "harness/error.h"
#include "lab03/ring.h"
#if DTL_HAVE_NCCL
#include "harness/comm/nccl_comm.h"
#endif

namespace dtl::lab03 {

/// @brief The element types the GPU ring is instantiated for (in src/).
/// @tparam T a candidate element type: float, __half or __nv_bfloat16.
template <typename T>
concept GpuElement = std::same_as<T, float> || std::same_as<T, __half> || std::same_as<T, __nv_bfloat16>;

/// @brief The width of one vector load or store: 16 bytes (4 floats, 8 halves).
inline constexpr std::size_t kVectorBytes = 16;

// ---------------------------------------------------------------------------
// Task D: the reduce-copy kernel (src/reduce_copy.cuh; given/reduce_copy.cu launches it)
// ---------------------------------------------------------------------------

/// @brief One reduce-copy: `dst[i] = a[i] + b[i]` for i < count (or `dst[i] = a[i]`
/// when `b` is null), and the same value into `dst2[i]` when `dst2` is not null.
///
/// In place is allowed: `dst` may equal `a` (each element is read before it is
/// written, by the same thread). Other overlaps are not. The pointers need only
/// be element-aligned; the kernel vectorizes when dst, a, b (and dst2) sit at the
/// same offset within 16 bytes, and falls back to one element at a time otherwise.
/// @tparam T float, __half or __nv_bfloat16.
template <GpuElement T>
struct ReduceCopyArgs {
  T* dst = nullptr;        ///< where the result goes (count elements)
  T* dst2 = nullptr;       ///< a second copy of the result (the fused form), or null
  const T* a = nullptr;    ///< first operand (count elements)
  const T* b = nullptr;    ///< second operand, or null for a plain copy
  std::size_t count = 0;   ///< elements
};

/// @brief The work of one GPU thread of the reduce-copy kernel, run on the host.
///
/// The kernel's thread `t` of `T` threads does exactly this, on device memory;
/// running every thread 0..num_threads-1 one after another on host memory must
/// therefore compute the whole reduce-copy. The CPU tests do that.
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] args the reduce-copy (host pointers here).
/// @param[in] thread this thread's index, in [0, num_threads).
/// @param[in] num_threads the number of threads of the launch (>= 1).
template <GpuElement T>
void reduce_copy_host_thread(const ReduceCopyArgs<T>& args, std::size_t thread, std::size_t num_threads);

/// @brief Launches the reduce-copy kernel on `stream` (asynchronous).
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] args the reduce-copy, device pointers; count 0 launches nothing.
/// @param[in] stream the stream to launch on.
/// @throws CudaError if the launch fails.
template <GpuElement T>
void reduce_copy(const ReduceCopyArgs<T>& args, cudaStream_t stream);

/// @brief Launches independent reduce-copies together, one kernel for up to
/// kMaxBatch of them (blockIdx.y picks the job), on `stream` (asynchronous).
///
/// The jobs must not write what another job reads or writes: the kernel runs them
/// in any order, at the same time.
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] jobs the reduce-copies, device pointers.
/// @param[in] stream the stream to launch on.
/// @throws CudaError if a launch fails.
template <GpuElement T>
void reduce_copy_batch(std::span<const ReduceCopyArgs<T>> jobs, cudaStream_t stream);

/// @brief The most jobs one reduce_copy_batch() kernel takes (kernel arguments are limited in size).
inline constexpr int kMaxBatch = 16;

/// @brief Copies `bytes` bytes device to device with a plain vectorized kernel (asynchronous).
///
/// The roofline of the reduce-copy: the same loads and stores, with nothing to
/// add. Given, not a task.
/// @param[out] dst device destination.
/// @param[in] src device source (must not overlap `dst`).
/// @param[in] bytes how much to copy.
/// @param[in] stream the stream to launch on.
/// @throws CudaError if the launch fails.
void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Task E: one rank's step (ring_job.cc)
// ---------------------------------------------------------------------------

/// @brief What one rank does at one step of the pull-model ring, as offsets into the buffers.
struct RingJob {
  std::size_t begin = 0;   ///< first element of the chunk received at this step
  std::size_t count = 0;   ///< elements of that chunk (may be 0)
  bool reduce = false;     ///< true: mine[chunk] = mine[chunk] + left[chunk]; false: mine[chunk] = left[chunk]
  bool to_right = false;   ///< fused: also write the result into right[chunk]
  bool skip = false;       ///< fused: this step was done by the step before it; do nothing
};

/// @brief Rank `rank`'s reduce-copy at step `step` of the 2(P-1)-step ring, pull model.
///
/// The chunk is ring_step(rank, P, step).recv_chunk, laid out by chunk_begin() and
/// chunk_count(). With `fuse`, the last reduce-scatter step (step P-2, where the
/// rank completes chunk `rank`) also writes the finished chunk into the right
/// neighbour's buffer (`to_right`) — which is exactly what step P-1, the first
/// allgather step, would have copied — and step P-1 is skipped (`skip`).
///
/// Why one step is race-free (the in-place hazard): at step s rank r writes chunk
/// c(r) = recv_chunk of its own buffer (and, fused, of its right neighbour's), and
/// reads chunk c(r) of its own and its left neighbour's buffer. Rank r+1 reads
/// chunk c(r+1) = c(r) + 1 (mod P) of rank r's buffer: a different chunk. So in
/// one step every (buffer, chunk) pair is touched by one rank only (fused too:
/// rank r touches chunk r of three buffers, nothing else), and all P jobs of a
/// step may run at once. Between steps there is a dependency (what r reads at
/// step s+1, r-1 wrote at step s), so steps run one after another.
/// @param[in] rank the rank, in [0, world_size).
/// @param[in] world_size P >= 2.
/// @param[in] step in [0, 2(P-1)).
/// @param[in] count the elements of each rank's buffer.
/// @param[in] fuse whether to fold step P-1 into step P-2.
/// @return the job; `count` may be 0 when the chunk is empty.
/// @throws InvalidArgument as ring_step() does, for a bad rank, world_size or step.
RingJob ring_job(int rank, int world_size, int step, std::size_t count, bool fuse);

/// @brief The reduce-copy that carries out `job` on one rank's buffers.
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] job from ring_job().
/// @param[in] mine this rank's buffer.
/// @param[in] left the left neighbour's buffer (rank - 1).
/// @param[in] right the right neighbour's buffer (rank + 1); written only when job.to_right.
/// @return the arguments for reduce_copy(): dst = mine (+ right), a/b = mine/left or left.
template <GpuElement T>
ReduceCopyArgs<T> ring_job_args(const RingJob& job, T* mine, const T* left, T* right) {
  ReduceCopyArgs<T> args;
  args.dst = mine + job.begin;
  args.dst2 = job.to_right ? right + job.begin : nullptr;
  args.a = job.reduce ? mine + job.begin : left + job.begin;
  args.b = job.reduce ? left + job.begin : nullptr;
  args.count = job.count;
  return args;
}

/// @brief The bytes of memory traffic (reads + writes) of the whole virtual-ring
/// allreduce: the numerator of its roofline.
///
/// At every step the received chunks are a permutation of all P chunks, so each
/// step moves `count` elements per operand over all ranks: a reduce step reads
/// two and writes one (3 count), the fused step writes one more (4 count), a copy
/// step reads one and writes one (2 count). In all 5(P-1) count elements
/// unfused, one count fewer fused.
/// @param[in] world_size P >= 1.
/// @param[in] count the elements of each buffer.
/// @param[in] element_bytes sizeof the element type.
/// @param[in] fuse whether the fused form is used.
/// @return bytes (0 for P = 1).
constexpr std::size_t virtual_ring_traffic_bytes(int world_size, std::size_t count, std::size_t element_bytes,
                                                 bool fuse) {
  if (world_size < 2) return 0;
  const auto steps = static_cast<std::size_t>(world_size - 1);
  return (5 * steps - (fuse ? 1 : 0)) * count * element_bytes;
}

// ---------------------------------------------------------------------------
// Task F: the virtual ring (src/virtual_ring.h; given/virtual_ring.cu and given/reduce_copy_host.cc run it)
// ---------------------------------------------------------------------------

/// @brief Ring allreduce over P buffers in host memory, with the kernel's per-thread
/// work run on the host: the CPU tests' view of the virtual ring.
///
/// The same loop as virtual_ring_allreduce() (src/virtual_ring.h), with each
/// step's jobs run by `host_threads` simulated threads, one after another.
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in,out] bufs P host buffers of `count` elements: in, each rank's
///                contribution; out, the sum in every one.
/// @param[in] count elements per buffer.
/// @param[in] fuse whether to fold step P-1 into step P-2 (see ring_job()).
/// @param[in] host_threads how many kernel threads to simulate (>= 1).
/// @throws InvalidArgument for an empty `bufs`, a null buffer or host_threads == 0.
template <GpuElement T>
void virtual_ring_allreduce_host(std::span<T* const> bufs, std::size_t count, bool fuse,
                                 std::size_t host_threads = 1);

/// @brief Ring allreduce over P device buffers on one GPU: P virtual ranks, one
/// process, one kernel launch per step (asynchronous on `stream`).
///
/// After the 2(P-1) steps (2P-3 launches fused) every buffer holds the
/// element-wise sum of all of them. The launches of one stream run in order,
/// which is the only synchronization the steps need (see ring_job()).
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in,out] bufs P device buffers of `count` elements on the current device.
/// @param[in] count elements per buffer.
/// @param[in] stream the stream to launch on.
/// @param[in] fuse whether to fold step P-1 into step P-2.
/// @throws InvalidArgument for an empty `bufs` or a null buffer.
/// @throws CudaError if a launch fails.
template <GpuElement T>
void virtual_ring_allreduce(std::span<T* const> bufs, std::size_t count, cudaStream_t stream, bool fuse = true);

/// @brief The virtual ring's launches captured once into a CUDA Graph and replayed
/// with one launch: Note [Fewer launches] in the handout, part 2.
///
/// At 1 MiB the 2P-3 launches of virtual_ring_allreduce() cost more than the data
/// (the first H100 run: 55% of the roofline at P = 4, 32% at P = 8). The
/// constructor runs virtual_ring_allreduce() once under stream capture, so the
/// graph holds exactly the kernels that loop launches, with the same arguments:
/// the same buffers and count every time it runs. run() then launches all of them
/// with one call, and the GPU starts each kernel without a round trip to the host.
/// The buffers are read afresh at every run(); write new inputs into them between
/// runs. Given code (given/virtual_ring_graph.cu): it wraps your loop, it does not
/// replace it.
/// @tparam T float, __half or __nv_bfloat16.
template <GpuElement T>
class VirtualRingGraph {
 public:
  /// @brief Captures virtual_ring_allreduce(bufs, count, stream, fuse) into a graph;
  /// nothing runs yet.
  /// @param[in] bufs P device buffers of `count` elements on the current device,
  ///            which must outlive this object and its last run's completion.
  /// @param[in] count elements per buffer.
  /// @param[in] stream the stream to capture on and to launch on: a stream of your
  ///            own (dtl::cuda::Stream), not the legacy default stream 0, which
  ///            cannot be captured; nothing else may be queued on it while the
  ///            constructor runs; it must outlive this object.
  /// @param[in] fuse whether to fold step P-1 into step P-2.
  /// @throws InvalidArgument as virtual_ring_allreduce() does.
  /// @throws CudaError if capturing or instantiating fails.
  VirtualRingGraph(std::span<T* const> bufs, std::size_t count, cudaStream_t stream, bool fuse = true);
  /// @brief Frees the graph without waiting: a run() still in flight completes, and
  /// the driver frees its graph then.
  ~VirtualRingGraph();
  VirtualRingGraph(const VirtualRingGraph&) = delete;
  VirtualRingGraph& operator=(const VirtualRingGraph&) = delete;

  /// @brief Launches the captured ring on the stream (asynchronous): afterwards
  /// every buffer holds the element-wise sum of what they held.
  /// @throws CudaError if the launch fails.
  void run();

  /// @brief How many kernels the graph holds (2P-3 fused, 2P-2 not; 0 for one
  /// buffer or an empty count).
  /// @return the graph's kernel nodes.
  [[nodiscard]] std::size_t kernels() const { return kernels_; }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
  std::size_t kernels_ = 0;
};

// ---------------------------------------------------------------------------
// Task G: the ring across processes (src/ipc_ring.h), run by IpcRing on GPUs
// through CUDA IPC (given/ipc_ring.cc) and by IpcRingHost on CPUs through an MPI
// shared-memory window (given/ipc_ring_host.cc)
// ---------------------------------------------------------------------------

/// @brief Makes every rank of `comm` agree on whether a stage went well (collective).
///
/// An MPI_Allreduce(MIN) of an "ok" flag: a barrier that also carries failure.
/// A rank that failed alone and threw would leave the others waiting forever in
/// the next collective; with this, all of them throw together.
/// @param[in] comm every rank of it must call this, in the same order.
/// @param[in] failure this rank's error message, or empty when it went well.
/// @param[in] elsewhere what the ranks that did not fail say, e.g. "another rank failed at step 3".
/// @throws Error (this rank's `failure`, or `elsewhere`) unless every rank went well.
/// @throws MpiError if the MPI_Allreduce itself fails.
inline void agree(MPI_Comm comm, const std::string& failure, const std::string& elsewhere) {
  int ok_here = failure.empty() ? 1 : 0, ok_everywhere = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&ok_here, &ok_everywhere, 1, MPI_INT, MPI_MIN, comm));
  if (!ok_everywhere) throw Error(failure.empty() ? elsewhere : failure);
}

/// @brief How task G's ring orders the ranks' steps across processes.
enum class IpcSync {
  kHost,   ///< task G (detail::run_ipc_ring()): after each step the host waits for its stream and agrees with every rank
  kFlags,  ///< task G2 (detail::run_ipc_ring_flags()): the streams signal and wait on their neighbours' step flags;
           ///< the host only queues the work and returns
};

/// @brief One of a rank's two neighbours in the ring: the one it reads from
/// (left, rank - 1) or the one it writes to when fused (right, rank + 1).
enum class Neighbour { kLeft, kRight };

/// @brief The flag value a rank that failed gives its neighbours, so that no
/// stream waits forever for a step that will not come (task G2): above any
/// value a call waits for (flags compare cyclically, as signed 64-bit
/// differences, so it is 2^62 and not the largest value). After it the ring
/// cannot be used again: the rings' allreduce() refuses, and says so.
inline constexpr std::uint64_t kFlagAbandoned = std::uint64_t{1} << 62;

/// @brief A ring allreduce across the processes of an MPI communicator, each
/// owning one device buffer, each reading its left neighbour's buffer through CUDA IPC.
///
/// The constructor (collective) allocates this rank's buffer, exchanges
/// cudaIpcMemHandle_t's with MPI_Allgather and opens the left and right
/// neighbours' handles (only those: a rank never touches another's memory). The
/// processes may share one GPU or use one each (the device is the caller's
/// choice, e.g. rank % gpu_count()); across GPUs the driver enables peer access.
/// allreduce() runs task G's loop (src/ipc_ring.h) with this rank's stream, or
/// task G2's, whose step flags live in the same allocation, after the buffer.
///
/// Not movable: peers hold this rank's handle, and the mapping of theirs is ours.
/// @tparam T float, __half or __nv_bfloat16.
template <GpuElement T>
class IpcRing {
 public:
  /// @brief Allocates, exchanges handles, opens the neighbours' buffers (collective over `comm`).
  /// @param[in] comm the ranks of the ring (duplicated; the ring keeps its own copy).
  /// @param[in] count elements of every rank's buffer (the same on every rank).
  /// @param[in] device the CUDA device this rank uses; it becomes the current device.
  /// @throws CudaError if allocation or IPC fails on this rank.
  /// @throws Error on every other rank when that happens on one (all ranks throw together).
  /// @throws MpiError if the handle exchange fails.
  IpcRing(MPI_Comm comm, std::size_t count, int device);
  /// @brief Closes the neighbours' handles, waits (MPI_Barrier) until every rank has
  /// closed its mapping of this rank's buffer, then frees it; never throws.
  ///
  /// Collective: destroy the ring on every rank together. Freeing exported memory
  /// that a peer still has mapped is undefined behaviour in CUDA, hence the barrier.
  ~IpcRing();
  IpcRing(const IpcRing&) = delete;
  IpcRing& operator=(const IpcRing&) = delete;

  /// @return this rank's device buffer (count() elements): fill it, call allreduce(), read it.
  T* data() const noexcept { return static_cast<T*>(buf_.data()); }
  /// @return the elements of every rank's buffer.
  std::size_t count() const noexcept { return count_; }
  /// @return the CUDA device of this rank's buffer.
  int device() const noexcept { return device_; }
  /// @return the stream the ring's kernels run on. Fill data() on it (the fill
  /// may still be in flight when allreduce() is called: the ring waits for it).
  cudaStream_t stream() const noexcept { return stream_ ? stream_->get() : nullptr; }

  /// @brief The ring allreduce in place: every rank's data() becomes the sum of all (collective).
  ///
  /// IpcSync::kHost runs detail::run_ipc_ring() (task G) with reduce_copy() on
  /// stream() as the launch and cudaStreamSynchronize(stream()) as the wait: the
  /// sum is in data() when it returns. IpcSync::kFlags runs
  /// detail::run_ipc_ring_flags() (task G2), whose signal and wait_for are
  /// cuStreamWriteValue64 and cuStreamWaitValue64 on the flags: it returns once
  /// the work is queued, and the sum is in data() in stream() order (read it on
  /// stream(), or synchronize it first).
  /// @param[in] fuse whether to fold step P-1 into step P-2.
  /// @param[in] sync task G's host handshakes or task G2's step flags.
  /// @throws CudaError on the rank whose kernel failed; Error on every other rank.
  /// @throws Error naming the device when `sync` is kFlags and its driver has no
  ///         64-bit stream memory operations.
  /// @throws MpiError if an agreement's MPI_Allreduce fails.
  void allreduce(bool fuse = true, IpcSync sync = IpcSync::kHost);

 private:
  Comm comm_;
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = -1;
  std::size_t count_ = 0;
  cuda::DeviceBuffer buf_;              // count_ elements, then this rank's step flag (flag_offset())
  std::optional<cuda::Stream> stream_;  // made once the device is selected
  T* left_ = nullptr;   // the left neighbour's buffer, mapped into this process
  T* right_ = nullptr;  // the right neighbour's (the same mapping as left_ when P = 2)
  std::uint64_t calls_ = 0;  // task G2's calls so far: each call's flag values lie above the last one's
  bool broken_ = false;      // a G2 call failed: its flags released every wait, so no call may follow
};

/// @brief Where a rank's step flag lies in its ring allocation: after `count`
/// elements of `element_bytes` each, on a 256-byte boundary (both rings).
/// @param[in] count elements of the buffer.
/// @param[in] element_bytes sizeof the element type.
/// @return the flag's byte offset from the buffer's start.
constexpr std::size_t flag_offset(std::size_t count, std::size_t element_bytes) {
  return (count * element_bytes + 255) / 256 * 256;
}

/// @brief How IpcRingHost's stand-in stream delays work, so that a missing wait or
/// agreement in task G's loop fails every time instead of now and then.
///
/// The "slow" ranks are those with (rank + seed) odd: every piece of data movement on
/// their stream (an upload, a copy out, each reduce-copy) starts `slow` after the
/// stream reaches it; task G2's signals and waits do not lag. For
/// any P >= 2 some fast rank then has a slow left neighbour, which is exactly the
/// rank that reads too early when a handshake is missing.
struct HostDelay {
  unsigned seed = 0;                    ///< which parity of ranks is slow
  std::chrono::microseconds slow{0};    ///< the delay before each piece of a slow rank's work (0: none)
};

/// @brief Task G's loop on CPUs: the processes of `comm` (on one machine) share
/// host memory through an MPI shared-memory window (MPI_Win_allocate_shared) in
/// place of CUDA IPC, and each rank's "stream" is a host thread that runs its
/// work in order, asynchronously, as a CUDA stream runs kernels.
///
/// allreduce() runs the very loop IpcRing::allreduce() runs (detail::run_ipc_ring(),
/// src/ipc_ring.h): the same ring_job() and ring_job_args(), the same waits and
/// agreements; the launch is the kernel's per-thread work run on the host
/// (reduce_copy_host_thread for every simulated thread). With a HostDelay, a loop
/// that forgets a wait or an agreement reads a neighbour's chunk before it is
/// there, and the result is wrong every time.
/// @tparam T float, __half or __nv_bfloat16.
template <GpuElement T>
class IpcRingHost {
 public:
  /// @brief Allocates this rank's part of the window and finds the neighbours' (collective over `comm`).
  /// @param[in] comm the ranks of the ring, all on one machine (duplicated).
  /// @param[in] count elements of every rank's buffer (the same on every rank).
  /// @param[in] delay how the slow ranks' streams lag (none by default).
  /// @param[in] host_threads how many kernel threads to simulate per reduce-copy (>= 1).
  /// @throws InvalidArgument naming `comm` and the rank if the ranks do not share memory,
  ///         naming `host_threads` if it is 0.
  /// @throws MpiError if the window cannot be made.
  IpcRingHost(MPI_Comm comm, std::size_t count, HostDelay delay = {}, std::size_t host_threads = 1);
  /// @brief Waits for this rank's stream and frees the window (collective); never throws.
  ~IpcRingHost();
  IpcRingHost(const IpcRingHost&) = delete;
  IpcRingHost& operator=(const IpcRingHost&) = delete;

  /// @return this rank's buffer in the window (count() elements).
  T* data() const noexcept { return mine_; }
  /// @return the elements of every rank's buffer.
  std::size_t count() const noexcept { return count_; }
  /// @return whether HostDelay made this rank's stream slow.
  bool slow() const noexcept { return slow_; }

  /// @brief Queues a copy of `values` into data() on this rank's stream and returns
  /// at once, as cudaMemcpyAsync on IpcRing::stream() would.
  /// @param[in] values count() elements (copied before this returns).
  /// @throws InvalidArgument naming `values` if its size is not count().
  void upload(std::span<const T> values);
  /// @brief Queues a copy of data() into `out` on this rank's stream and returns at
  /// once, as cudaMemcpyAsync from IpcRing::data() would: `out` holds it once the
  /// stream has run it (download() waits for that). Keep `out` alive until then.
  /// @param[out] out count() elements.
  /// @throws InvalidArgument naming `out` if its size is not count().
  void copy_out(std::span<T> out);
  /// @brief Waits for this rank's stream, then copies data() out.
  /// @return count() elements.
  std::vector<T> download();

  /// @brief The ring allreduce in place: every rank's data() becomes the sum of all (collective).
  ///
  /// IpcSync::kHost runs task G's loop, IpcSync::kFlags task G2's: its signal is
  /// an atomic store to this rank's flag in the window and its wait_for a spin of
  /// the stream's thread on a neighbour's (at most 10 s, then the stream fails,
  /// naming the neighbour and the value it waited for). Read the sum with download().
  /// @param[in] fuse whether to fold step P-1 into step P-2.
  /// @param[in] sync task G's host handshakes or task G2's step flags.
  /// @throws Error on every rank when the work failed on one of them.
  void allreduce(bool fuse = true, IpcSync sync = IpcSync::kHost);

  /// @brief For tests: this rank's launch() throws dtl::Error (as a failed kernel
  /// launch would) once `launches` more launches have been queued; negative: never.
  /// @param[in] launches how many launches still succeed.
  void fail_launch_after(int launches);

  /// @brief This rank's stream, as task G's loop sees it (see detail::run_ipc_ring()).
  class Stream;

 private:
  Comm comm_;
  int rank_ = 0;
  int world_size_ = 1;
  std::size_t count_ = 0;
  std::size_t host_threads_ = 1;
  bool slow_ = false;
  MPI_Win window_ = MPI_WIN_NULL;
  T* mine_ = nullptr;
  T* left_ = nullptr;
  T* right_ = nullptr;
  std::uint64_t calls_ = 0;  // task G2's calls so far
  bool broken_ = false;      // a G2 call failed (see IpcRing)
  std::unique_ptr<Stream> stream_;
};

#if DTL_HAVE_NCCL
// ---------------------------------------------------------------------------
// The vendor: NCCL (given/nccl_collectives.cc)
// ---------------------------------------------------------------------------

/// @brief ncclAllReduce (sum) on `comm`'s stream order: asynchronous on `stream`.
/// Collective: every rank of `comm` calls it with the same count.
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] comm the NCCL communicator.
/// @param[in] send_buf count elements (may equal recv_buf: in place).
/// @param[out] recv_buf count elements, the sum over ranks.
/// @param[in] count elements.
/// @param[in] stream the stream to enqueue on.
/// @throws NcclError if NCCL fails.
template <GpuElement T>
void nccl_allreduce(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t count, cudaStream_t stream);

/// @brief ncclReduceScatter (sum): rank r gets block r of the sum (asynchronous; collective).
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] comm the NCCL communicator.
/// @param[in] send_buf P * recv_count elements.
/// @param[out] recv_buf recv_count elements: block `rank` of the sum.
/// @param[in] recv_count elements per rank (NCCL's blocks are equal, unlike chunk_count()).
/// @param[in] stream the stream to enqueue on.
/// @throws NcclError if NCCL fails.
template <GpuElement T>
void nccl_reduce_scatter(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t recv_count,
                         cudaStream_t stream);

/// @brief ncclAllGather: every rank gets every rank's block, in rank order (asynchronous; collective).
/// @tparam T float, __half or __nv_bfloat16.
/// @param[in] comm the NCCL communicator.
/// @param[in] send_buf send_count elements.
/// @param[out] recv_buf P * send_count elements.
/// @param[in] send_count elements per rank.
/// @param[in] stream the stream to enqueue on.
/// @throws NcclError if NCCL fails.
template <GpuElement T>
void nccl_allgather(const NcclComm& comm, const T* send_buf, T* recv_buf, std::size_t send_count,
                    cudaStream_t stream);
#endif

}  // namespace dtl::lab03
