/// @file
/// @brief Lab 04 — bucketed DDP: the API you implement in src/.
///
/// Data-parallel training keeps a full copy of the model on every rank, gives
/// each rank a different slice of the batch, and averages the gradients before
/// every optimizer step, so that every rank takes the same step. The work of
/// this lab is to make that averaging cheap:
///
///   - broadcast the initial parameters from rank 0, after checking that every
///     rank built the same model (broadcast_parameters(), check_model_agreement());
///   - group the gradients into **buckets** in reverse parameter order, each at
///     most a byte cap, the first one smaller (assign_buckets()); each bucket is
///     a view over one flat gradient buffer, so nothing is copied;
///   - start a bucket's asynchronous allreduce as soon as backward has produced
///     its last gradient, while backward goes on (Reducer, ReducerMode::kOverlapped);
///     wait for all of them, averaged, before the optimizer step (Reducer::finish());
///   - accumulate gradients over micro-steps without communicating (Reducer::no_sync()).
///
/// For comparison the same Reducer runs naive (one allreduce per parameter after
/// backward) and bucketed without overlap (the buckets' allreduces after backward).
/// The reasons live beside the code, as notes in src/ (the skeleton's and the
/// reference's): in ddp_buckets.cc Note [Bucket order], Note [Why a cap] and
/// Note [The small first bucket]; in ddp_reducer.cc Note [Issue in bucket order]
/// and Note [Averaging]; in ddp_model.cc Note [A check that cannot hang].
///
/// Files under src/:
///   - ddp_buckets.cc      assign_buckets()
///   - ddp_model.cc        check_model_agreement(), broadcast_parameters()
///   - ddp_reducer.cc      Reducer: the grad_ready hook, launching, finish(), no_sync()
/// and, given (labs/04_bucketed_ddp/given/, compiled into both builds, not yours to edit):
///   - ring_communicator.cc  make_ring_communicator(): your lab-03 ring behind the Communicator
///                         interface (it needs lab 03 done), and make_communicator()
///
/// Every communication goes through dtl::Communicator (harness/comm/communicator.h),
/// so the same reducer runs over Open MPI, the lab-03 ring or the alpha-beta
/// network emulator (EmulatedCommunicator: results labelled "emulated"), and, with
/// the model on a GPU, over NCCL, its allreduces on a side stream ordered after
/// backward's kernels by events (the handout's "On a GPU: streams and events";
/// Note [On a GPU, the issue is the event] in src/ddp_reducer.cc).
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/nn/model.h"

namespace dtl::lab04 {

/// @brief PyTorch's default bucket cap (DistributedDataParallel's bucket_cap_mb = 25).
inline constexpr std::size_t kDefaultBucketCapBytes = std::size_t{25} << 20;
/// @brief PyTorch's first bucket cap (dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB).
inline constexpr std::size_t kDefaultFirstBucketCapBytes = std::size_t{1} << 20;

// ---------------------------------------------------------------------------
// Task A: the model is the same on every rank (ddp_model.cc)
// ---------------------------------------------------------------------------

/// @brief Checks that every rank of `backend` holds the same model: the same number
/// of parameters, and parameter i has the same name and element count everywhere.
///
/// Each rank makes a fingerprint of its model (count, and per parameter its numel
/// and a hash of its name) and the ranks exchange fingerprints with collectives
/// of a size every rank knows in advance, so that a disagreement can never make
/// a collective hang (see Note [A check that cannot hang] in src/ddp_model.cc).
/// Every rank then throws the same error.
///
/// Collective: every rank of `backend` must call it.
/// @param[in] backend the ranks that must agree.
/// @param[in] model this rank's model.
/// @throws dtl::InvalidArgument on every rank if two ranks disagree. The message
///         holds "rank R" for R the first rank that differs from rank 0, and either
///         the first parameter where it differs (its index, its name as on this rank,
///         e.g. "fc0.weight", and both element counts) or, when the parameter counts
///         differ, both counts as plain numbers (e.g. "6" and "7").
void check_model_agreement(Communicator& backend, const nn::Model& model);

/// @brief Makes every rank's parameters equal to rank `root`'s: check_model_agreement(),
/// then a broadcast of every parameter (or of the flat parameter buffer when the
/// model was flattened), waited for before returning.
///
/// Collective: every rank of `backend` must call it.
/// @param[in] backend the ranks.
/// @param[in,out] model this rank's model; its parameter values are overwritten except on root.
/// @param[in] root the rank whose parameters everyone gets (default 0).
/// @throws dtl::InvalidArgument as check_model_agreement(), or for a bad root.
void broadcast_parameters(Communicator& backend, nn::Model& model, int root = 0);

// ---------------------------------------------------------------------------
// Task B: buckets (ddp_buckets.cc)
// ---------------------------------------------------------------------------

/// @brief Groups parameters into buckets, in reverse parameter order.
///
/// Walk the parameters from the last to the first, adding each to the current
/// bucket. A parameter that would take the current (non-empty) bucket past its
/// cap closes it and opens the next one. The first bucket's cap is
/// `first_cap_bytes`, every later one's `cap_bytes`. So: a bucket is never above
/// its cap unless it holds a single parameter (a parameter larger than the cap
/// gets a bucket of its own), and a bucket whose size reaches its cap exactly is
/// closed at once. Zero-byte parameters join the current bucket: the open one, or,
/// right after a bucket closed (at its cap, or because of a parameter above it), a
/// new one that the next parameters join too; never a bucket already closed, and a
/// zero-byte parameter does not close a bucket by itself. Why reverse
/// order, why a cap and why a smaller first bucket: Note [Bucket order],
/// Note [Why a cap] and Note [The small first bucket] in src/ddp_buckets.cc.
///
/// Example: byte sizes {40, 4, 400, 4, 40} (forward order), cap 100, first cap 50:
/// bucket 0 = {4, 3} (44 bytes; 400 would exceed 50), bucket 1 = {2} (400 > cap:
/// alone), bucket 2 = {1, 0} (44 bytes).
/// @param[in] param_bytes each parameter's gradient size in bytes, in forward order.
/// @param[in] cap_bytes the cap of every bucket but the first, > 0.
/// @param[in] first_cap_bytes the first bucket's cap, > 0 (PyTorch: 1 MiB).
/// @return the buckets in the order they fill during backward; each holds parameter
///         indices (into param_bytes) in decreasing order. Empty when param_bytes is empty.
/// @throws dtl::InvalidArgument if cap_bytes or first_cap_bytes is 0.
std::vector<std::vector<int>> assign_buckets(std::span<const std::size_t> param_bytes, std::size_t cap_bytes,
                                             std::size_t first_cap_bytes);

// ---------------------------------------------------------------------------
// Task C: the reducer (ddp_reducer.cc)
// ---------------------------------------------------------------------------

/// @brief When the gradient allreduces run.
enum class ReducerMode {
  kNaive,       ///< one allreduce per parameter, all started in finish(), after backward
  kBucketed,    ///< one allreduce per bucket, all started in finish(), after backward
  kOverlapped,  ///< one allreduce per bucket, started from grad_ready as soon as the bucket is full
};

/// @brief The mode's name.
/// @param[in] mode the mode.
/// @return "naive", "bucketed" or "overlapped".
const char* reducer_mode_name(ReducerMode mode);

/// @brief How a Reducer is set up.
struct ReducerOptions {
  ReducerMode mode = ReducerMode::kOverlapped;               ///< when the allreduces run
  std::size_t bucket_cap_bytes = kDefaultBucketCapBytes;     ///< assign_buckets()'s cap_bytes
  std::size_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes;  ///< assign_buckets()'s first_cap_bytes
  Timeline* timeline = nullptr;  ///< if set, finish() adds each allreduce as a span on track "comm"
  /// If not empty: the buckets to use, as assign_buckets() would return them (parameter
  /// indices, each bucket decreasing), instead of calling assign_buckets() with the caps.
  /// The grading tests of the reducer give them explicitly, so that a fault in task B
  /// costs task B's item only. Ignored in naive mode (one bucket per parameter).
  std::vector<std::vector<int>> buckets = {};
};

/// @brief One bucket: a contiguous view of the flat gradient buffer.
struct Bucket {
  std::vector<int> parameters;  ///< indices into Model::parameters(), decreasing (the order they become ready)
  std::size_t offset = 0;       ///< its first element in the flat gradient buffer
  std::size_t count = 0;        ///< its elements (the sum of its parameters' numels)
};

/// @brief What the last finish() measured.
struct StepStats {
  int allreduces = 0;                 ///< allreduces issued in the step
  double exposed_seconds = 0.0;       ///< time finish() spent waiting: the communication backward did not hide
  double comm_seconds = 0.0;          ///< the allreduces' busy time: the union of their [start, end] spans
  double first_issue_seconds = 0.0;   ///< clock_seconds() when the first allreduce was issued
  double last_end_seconds = 0.0;      ///< clock_seconds() when the last allreduce ended
  /// @brief The part of the communication that was hidden behind compute.
  /// @return (comm - exposed) / comm, clamped to [0, 1]; 0 when there was no communication.
  double overlap_fraction() const;
};

/// @brief Averages gradients across ranks during backward, bucket by bucket (DDP's reducer).
///
/// Set-up (constructor): flattens the model's gradients into one buffer (unless
/// already flat), assigns buckets with assign_buckets() (naive mode: one bucket
/// per parameter), and installs the model's `grad_ready` hook. Per step:
///
///     model.zero_grad();  model.forward(x);  model.backward(dy);   // buckets launch (overlapped)
///     reducer.finish();                                            // wait, average
///     optimizer.step(params, grads);
///
/// Every rank's gradients are then the average over the ranks. The allreduces
/// are issued in bucket order on every rank (the Communicator contract), even if
/// a later bucket becomes ready first (see Note [Issue in bucket order] in
/// src/ddp_reducer.cc).
///
/// Errors: a parameter that was marked ready twice in one step throws dtl::Error
/// from the hook, naming the parameter (a backward without finish()); a parameter that never got its gradient
/// makes finish() throw, naming it and its bucket, after waiting for what was
/// issued — never a hang. Not copyable or movable (the hook points at it); the
/// destructor removes the hook and waits for anything still pending.
class Reducer {
 public:
  /// @brief Flattens the gradients, assigns buckets and installs the grad_ready hook.
  ///
  /// Collective: calls check_model_agreement(), so every rank of `backend` must construct its Reducer together.
  /// @param[in] backend the ranks to average over; must outlive the reducer.
  /// @param[in,out] model the model; must outlive the reducer. Its grad_ready hook is replaced.
  /// @param[in] options mode, caps, timeline.
  /// @throws dtl::InvalidArgument as check_model_agreement() or assign_buckets(), or
  ///         if the gradients are not f32.
  Reducer(Communicator& backend, nn::Model& model, ReducerOptions options = {});
  /// @brief Removes the hook; waits for pending allreduces (errors are printed, not thrown).
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// @brief Completes the step's gradient averaging: issues what is not issued
  /// yet (naive and bucketed modes: everything), waits for every allreduce, and
  /// leaves every gradient averaged over the ranks. Resets for the next step.
  ///
  /// Collective: every rank of the communicator must call it once per step.
  /// @throws dtl::Error if a parameter did not get its gradient in this step (after
  ///         waiting for what was issued); the message holds its name (e.g.
  ///         "unused.weight") and "bucket B" for its bucket index B.
  /// @throws dtl::Error if called inside a no_sync() scope.
  /// @throws TimeoutError or the backend's Error from a failed allreduce.
  void finish();

  /// @brief While the returned scope lives, backward only accumulates gradients
  /// locally: nothing is counted or communicated. The next backward outside it
  /// then averages the accumulated gradients (gradient accumulation over micro-steps).
  class NoSync {
   public:
    /// @brief Ends the scope: backward synchronizes again.
    ~NoSync();
    /// @brief Moves the scope (the moved-from one ends nothing).
    /// @param[in,out] other the scope to take over.
    NoSync(NoSync&& other) noexcept;
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    friend class Reducer;
    explicit NoSync(Reducer* reducer);
    Reducer* reducer_;
  };
  /// @brief Starts a no-sync scope (see NoSync).
  /// @return the scope; synchronization resumes when it is destroyed.
  /// @throws dtl::Error if a step is half done (some gradients already marked ready).
  NoSync no_sync();
  /// @return true inside a no_sync() scope.
  bool in_no_sync() const noexcept { return no_sync_; }

  /// @return the buckets, in the order they are issued.
  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  /// @return the options.
  const ReducerOptions& options() const noexcept { return options_; }
  /// @return what the last finish() measured.
  const StepStats& last_step() const noexcept { return stats_; }

 private:
  void on_grad_ready(nn::Parameter& param);
  void launch_ready_buckets();
  void launch(std::size_t bucket);
  void record_stats(double wait_begin, double wait_end);
  void reset_step();

  Communicator& backend_;
  nn::Model& model_;
  ReducerOptions options_;
  std::vector<nn::Parameter*> params_;   // Model::parameters(), forward order
  std::unordered_map<const nn::Parameter*, int> index_of_;  // parameter -> its index in params_
  float* flat_grad_ = nullptr;           // the flat gradient buffer every bucket is a view of
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;           // parameter index -> bucket
  std::vector<std::size_t> pending_;     // per bucket: parameters not ready yet this step
  std::vector<char> ready_;              // per parameter: marked ready this step
  std::vector<Work> work_;               // per bucket: its allreduce this step
  std::size_t next_launch_ = 0;          // the first bucket not issued yet
  bool no_sync_ = false;
  StepStats stats_;
};

// ---------------------------------------------------------------------------
// The lab-03 ring as a backend (ring_communicator.cc, given)
// ---------------------------------------------------------------------------

/// @brief Your lab-03 ring behind the Communicator interface: a
/// dtl::ThreadedCommunicator named "lab03-ring" whose blocking functions are
/// lab 03's, run one at a time in FIFO order on a communication thread, on a
/// duplicate of the parent communicator. Collective over `parent`.
///
/// allreduce is lab03::allreduce_ring() (sum, and average as ReduceOp::kAvg);
/// reduce_scatter and allgather are lab03::reduce_scatter_ring() and
/// allgather_ring() on equal blocks; broadcast, which lab 03 does not have, is
/// MPI_Bcast. Types: f32, f64 and i32 (others are refused when issued). If lab
/// 03's functions are still skeletons, wait() throws dtl::NotImplemented saying
/// that lab 03 must be done first.
/// @param[in] parent e.g. MPI_COMM_WORLD.
/// @return the communicator.
/// @throws dtl::Error when MPI was initialized below MPI_THREAD_MULTIPLE.
std::unique_ptr<Communicator> make_ring_communicator(MPI_Comm parent);

// ---------------------------------------------------------------------------
// Backends by name (tests, benchmarks)
// ---------------------------------------------------------------------------

/// @brief Makes a backend from its name. Collective over `parent`.
///
/// Names: "mpi-thread", "mpi-nonblocking" (MpiCommunicator), "ring" (make_ring_communicator()),
/// "emulated:LINK" (EmulatedCommunicator over mpi-thread; LINK as parse_link(),
/// e.g. "emulated:10GbE" or "emulated:alpha=5us,bw=10GB/s"), "nccl" (NcclCommunicator,
/// device buffers only, where NCCL was found at build time).
/// @param[in] name the backend's name.
/// @param[in] parent the ranks, e.g. MPI_COMM_WORLD.
/// @return the communicator.
/// @throws dtl::InvalidArgument for an unknown name, or "nccl" in a build without NCCL.
/// @throws dtl::Error for "nccl" where NCCL cannot run (no GPU, or fewer GPUs than ranks).
std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm parent);

}  // namespace dtl::lab04
