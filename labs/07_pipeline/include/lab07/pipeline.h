/// @file
/// @brief Lab 07 — pipeline parallelism: the API you implement in src/.
///
/// A model too large for one device is cut into P **stages**, consecutive groups
/// of units, one per rank. Activations flow forward from stage s to s + 1 and
/// their gradients flow back. Run one batch at a time ("naive model
/// parallelism") and only one stage works at any moment: the others wait, and
/// the waiting (the **bubble**) is (P - 1)/P of the step. Cut the batch into m
/// **micro-batches** and the stages work on different micro-batches at once.
/// This lab builds, on the training core (harness/nn) and plain MPI point-to-point:
///
///   - Task A (balance.cc): measure each unit's forward + backward time and cut
///     the model into stages by time, not by parameter count; report the
///     imbalance (measure_unit_costs(), balance_stages(), stage_imbalance());
///   - Task B (schedule.cc): the order of forwards and backwards on one stage,
///     GPipe (all forwards, then all backwards) and 1F1B (warm-up, one forward
///     one backward, cool-down) (gpipe_schedule(), one_f_one_b_schedule());
///   - Task C (stage.cc): the executor that runs a schedule on one stage with
///     nonblocking sends and receives tagged per micro-batch (a PeerLink: Open MPI
///     on the CPU, NCCL on a GPU, Note [A stage on a GPU]), activation slots,
///     gradient accumulation and optional activation checkpointing
///     (PipelineStage). With m = 1 it is naive model parallelism;
///   - Task D (stash.cc): weight stashing for PipeDream's asynchronous 1F1B,
///     so that a micro-batch's backward uses the weights its forward used (WeightStash);
///   - Task F (interleave.cc): Megatron's interleaved 1F1B, v chunks per rank
///     (lab07/interleave.h: interleaved_schedule(), run by the given InterleavedStage);
///   - Task G (zero_bubble.cc): the zero-bubble schedule ZB-H1, each backward split
///     into B and W (lab07/zero_bubble.h: zb_h1_schedule(), run by InterleavedStage);
///   - Task E (grid.cc): pipelines side by side, data parallel across them:
///     sub-communicators and the gradient average per stage (lab07/grid.h:
///     make_grid(), allreduce_data_parallel_gradients()).
///
/// and, given (labs/07_pipeline/given/, compiled into both builds, not yours to edit):
///   - pipeline_util.cc   micro-batch rows and views, schedule text, bubble_fraction();
///   - interleaved_stage.cc  InterleavedStage, the executor of a rank's v chunks (lab07/interleave.h).
///
/// See Note [The bubble], Note [GPipe and 1F1B], Note [Activation slots],
/// Note [Deadlock-free ordering], Note [A stage on a GPU], Note [Activation checkpointing],
/// Note [Weight stashing], Note [Balancing stages] and Note [Pipeline x data parallel]
/// below, Note [Interleaving] in lab07/interleave.h and Note [Zero bubble] in
/// lab07/zero_bubble.h; the handout and the slides
/// refer to them.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/peer_link.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/tensor.h"
#include "lab07/grid.h"

namespace dtl::lab07 {

// Note [The bubble]
// ~~~~~~~~~~~~~~~~~
// P stages, m micro-batches, each stage taking t_f for a micro-batch's forward
// and t_b for its backward (balanced stages). Micro-batch i's forward reaches
// stage s after s forward times; the last stage finishes the last forward after
// (m + P - 1) t_f, and the backwards drain the same way. GPipe's step is
//
//     T = (m + P - 1) (t_f + t_b),   of which each stage is busy m (t_f + t_b),
//
// so every stage idles for (P - 1)(t_f + t_b) per step, and the idle fraction
// (the bubble) is
//
//     bubble = (P - 1) / (m + P - 1).
//
// m = 1 is naive model parallelism: (P - 1)/P, one stage busy at a time. m = 4P
// brings the bubble under 20%. 1F1B has the *same* bubble (it only reorders the
// work of each stage; the fill and drain are the same); what it changes is
// memory (Note [GPipe and 1F1B]). Unbalanced stages make it worse: the pipeline
// runs at the pace of the slowest stage, so the step is about
// (m + P - 1) max_s (t_f + t_b)_s, and the others idle for the difference too
// (Note [Balancing stages]). bubble_fraction() is this formula.

// Note [GPipe and 1F1B]
// ~~~~~~~~~~~~~~~~~~~~~
// Both run the same m forwards and m backwards per stage, accumulate the
// gradients of all micro-batches and take one optimizer step per batch (a
// "flush"): the result equals one process on the whole batch.
//
// GPipe (Huang et al., 2019): all forwards, then all backwards.
//
//     stage s:   F0 F1 ... F(m-1)  B0 B1 ... B(m-1)
//
// A micro-batch's activations live from its forward to its backward, so after
// the forwards a stage holds all m of them: activation memory grows with m, and
// a small bubble (large m) costs memory.
//
// 1F1B (PipeDream-Flush, Narayanan et al., 2021; Megatron-LM's default): stage s
// runs w warm-up forwards, then alternates one forward and one backward, then
// runs the backwards that are left (cool-down). Forwards and backwards each keep
// micro-batch order, and every micro-batch's forward comes before its backward.
//
//     stage s:   F F .. F   |   F B  F B  ...  F B   |   B .. B
//                 warm-up   |        steady          |  cool-down
//
// w is the shortest warm-up after which the steady alternation never waits on
// the stages after s (balanced stages, free messages), and at most m: deriving it
// is lab 07's task B. A backward frees its micro-batch's activations, so stage s
// never holds more than w + 1 micro-batches (m at most), whatever m is. The
// bubble is GPipe's; the memory no longer grows with m.
//
// P = 3, m = 4:
//
//     stage 0:  F0 F1 F2 B0 F3 B1 B2 B3
//     stage 1:  F0 F1 B0 F2 B1 F3 B2 B3
//     stage 2:  F0 B0 F1 B1 F2 B2 F3 B3

// Note [Activation slots]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A layer keeps what its backward needs (its input, its output) in a cache. With
// several micro-batches in flight, each needs its own: harness/nn keeps one cache
// per *slot* (Model::set_slot(), Model::release_slot()). The executor uses slot i
// for micro-batch i: set_slot(i) before its forward and its backward, and
// release_slot(i) right after its backward. The slot's bytes are charged to
// MemoryCategory::kActivations, so the memory tracker counts exactly the
// micro-batches in flight: with A bytes per micro-batch's forward and D bytes of
// one backward's gradients, a stage's peak is (slots in flight) * A + D.
//
// Everything that exists only to be sent or received is charged to
// MemoryCategory::kCommunication instead: the receive buffers of activations and
// gradients, the copies that are sent, and the last stage's dL/dlogits of each
// micro-batch (it plays the part of a received gradient). The tests count
// kActivations, so they see the slots and nothing else.

// Note [Deadlock-free ordering]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Stage s sends activations to s + 1 and gradients to s - 1, and receives both
// from the same neighbours: messages cross in both directions. With blocking
// MPI_Send above the eager limit (4 KiB on this machine's Open MPI) this
// deadlocks in 1F1B's steady state: stage s sends F(i)'s activation to s + 1
// while s + 1 sends B(j)'s gradient to s, and each send waits for a receive that
// its peer only posts after its own send returns. The executor's messages go
// through a dtl::PeerLink (harness/comm/peer_link.h; on the CPU MpiPeerLink:
// MPI_Isend, MPI_Irecv, MPI_Wait), and it therefore
//
//   - sends only with isend(), from a copy it keeps until the send completes:
//     a send never blocks;
//   - posts each receive (irecv()) before it is needed, and blocks only in
//     the Work::wait() of the receive of the action it runs next (MPI_Wait);
//   - tags every message with its micro-batch and direction:
//     activation of micro-batch i = tag 2i, gradient of micro-batch i = tag 2i + 1
//     (activation_tag(), gradient_tag()). A receive names its source and its tag,
//     never MPI_ANY_SOURCE or MPI_ANY_TAG, so a gradient never lands in an
//     activation buffer and micro-batch 3 never in micro-batch 2's;
//   - completes every send before the step returns, so nothing leaks into the
//     next step (MPI keeps messages of one tag in order, but a step must not
//     depend on that).
//
// Then the only way to deadlock is a schedule that waits in a cycle: stage s
// runs B(i) before F(j) while stage s + 1 needs F(j)'s activation before it can
// produce B(i)'s gradient. GPipe's and 1F1B's orders never do that. The
// test PipelineDeadlock.DISABLED_MisorderedScheduleIsReported runs one that does
// (stage 0 with the last stage's 1F1B order, stage 1 with GPipe's): stage 0 waits
// for B0's gradient, stage 1 for F1's activation. The test harness's watchdog
// reports it as a DEADLOCK, each rank in MPI_Wait on its Irecv, with source and
// tag: never a silent hang.

// Note [A stage on a GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The same executor runs a stage whose model is on a GPU (Model::to(Device::kCuda)):
// every layer's kernels are queued on one compute stream (harness/nn/compute_stream.h),
// and PipelineOptions::link is a dtl::NcclPeerLink (harness/comm/nccl_peer_link.h),
// whose ncclSend/ncclRecv run on a stream per direction (its Note [One channel per
// direction]). Then, on stage s:
//
//     compute:  F(i): wait(recv act i) ... kernels ... clone y [ready]  F(i+1) ...
//                        ^                                   |
//     act in:  ncclRecv act i -> [done]                      |
//     act out:                                   wait(ready) -> ncclSend act i -> [done]
//
//   - a receive's buffer may be read only after its Work::wait(): only then does
//     the compute stream wait for the receive's `done`;
//   - a send reads its buffer after the kernels queued before isend() (its
//     `ready`), concurrently with the kernels queued after: the buffer must be a
//     copy nothing else writes, kept until the send completed;
//   - NCCL pairs messages by order, not by tag: each direction's messages must be
//     issued in the same order on both ends (GPipe and 1F1B do: Note [Tags and
//     NCCL's order] in harness/comm/peer_link.h);
//   - buffers are made on the model's device (device_).
// A stage written by these rules runs unchanged on both; the CPU tests check the
// rules where there is no GPU (a stream model of the link, tests/stream_order_test.cc).

// Note [Activation checkpointing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With PipelineOptions::checkpoint, a stage keeps only each micro-batch's *input*
// between its forward and its backward: the forward's slot is released at once,
// and the backward first runs the stage's forward again (set_slot(i),
// forward(input)), then its backward. Activation memory drops from
// (slots in flight) * A + D to A + D, for one more forward per micro-batch:
// roughly t_f extra on t_f + t_b, about a third more compute when t_b = 2 t_f.
// (Megatron recomputes per layer, and selectively, to pay less.) The inputs
// kept are kCommunication (they are the received buffers), and they are what
// GPipe with checkpointing still holds m of.

// Note [Weight stashing]
// ~~~~~~~~~~~~~~~~~~~~~~
// PipeDream's asynchronous 1F1B (Narayanan et al., 2019) has no flush: every stage
// updates its weights right after each micro-batch's backward, and the pipeline
// never drains. Stage s runs F(i) with the weights of version v_f(i) =
// max(0, i - w), w its warm-up (the updates of B0 .. B(i - w - 1) are in), but by the
// time B(i) runs, the updates of B0 .. B(i-1) are in: version i. A backward with
// other weights than its forward computes a gradient of no function at all (the
// cached activations belong to version v_f(i), the weights used for dx to
// version i). Weight stashing keeps a copy of the weights each forward used
// (WeightStash::save()), puts it in place for that micro-batch's backward
// (begin_backward()), and puts the newest weights back afterwards
// (end_backward()), before the update. Stage s holds up to w + 1 versions: the
// memory price of no flush. (PipeDream-2BW keeps two versions by updating every
// m micro-batches; PipeDream-Flush, our 1F1B, keeps one and pays the bubble.)

// Note [Balancing stages]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The pipeline runs at the pace of its slowest stage. Cutting by parameter
// count (Model::split_stages' default) balances memory, not time: a GPT's
// embedding has many parameters and costs little (a lookup), its head has many
// and costs much (a V-wide GEMM; the loss after it is not a unit and is not
// timed by measure_unit_costs()), and attention costs grow with
// T^2 without any parameter. So measure: time each unit's forward and backward
// (the model's pre/post hooks around each unit), take the median of a few runs,
// and cut the units into P contiguous stages minimising the largest stage's
// time (balance_stages(): a linear-partition problem; dynamic programming in
// O(P n^2), or a binary search on the answer with a greedy check). Report
// imbalance = max stage time / mean stage time: 1 is perfect, and the step is
// about imbalance times longer than a balanced pipeline's.

// Note [Pipeline x data parallel]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// W = D x P ranks: D pipelines (replicas) of P stages. Rank r is stage r mod P of
// replica r / P. Two sub-communicators per rank (make_grid(), lab07/grid.h): its
// pipeline, the grid's model_group (the P ranks of its replica, in stage order:
// point-to-point between stages), and its data_group (the D ranks that hold the
// same stage: the gradient average). Each replica takes 1/D of the batch; after
// the pipeline step, each stage's gradients are averaged over its data group
// (allreduce_data_parallel_gradients()), and every replica of a stage takes the same
// optimizer step. The gradient allreduces of different stages run on disjoint
// groups, at once. With 4 ranks: replicas {0, 1} and {2, 3}; data groups {0, 2}
// (stage 0) and {1, 3} (stage 1).

// ---------------------------------------------------------------------------
// Schedules: what a stage runs, in order
// ---------------------------------------------------------------------------

/// @brief Which pass of a micro-batch: forward or backward (or, split, B and W).
enum class Pass : char {
  kForward = 'F',   ///< the stage's forward of one micro-batch
  kBackward = 'B',  ///< the stage's backward of one micro-batch; with kWeight in the schedule, its input half
  kWeight = 'W',    ///< the weight half of a split backward (lab07/zero_bubble.h); only InterleavedStage runs it
};

/// @brief One step of a stage's schedule: F, B (or W) of one micro-batch (on one chunk).
struct Action {
  Pass pass = Pass::kForward;  ///< forward or backward
  int micro_batch = 0;   ///< which micro-batch, in [0, m)
  int chunk = 0;         ///< which of the rank's chunks (lab07/interleave.h); 0 without interleaving
  /// @brief Equal pass and micro-batch.
  /// @param[in] other the other action. @return whether they are equal.
  bool operator==(const Action& other) const = default;
};

/// @brief The text of a schedule, e.g. "F0 F1 B0 B1" (given); when some action has a
/// chunk other than 0, every action shows its chunk: "F0[0] F0[1] B0[1] B0[0]".
/// @param[in] schedule the actions.
/// @return the actions separated by spaces.
std::string schedule_string(std::span<const Action> schedule);

/// @brief The bubble of a balanced pipeline (Note [The bubble]) (given).
/// @param[in] stages P >= 1.
/// @param[in] micro_batches m >= 1.
/// @return (P - 1) / (m + P - 1).
double bubble_fraction(int stages, int micro_batches);

/// @brief The tag of micro-batch i's activation message (Note [Deadlock-free ordering]).
/// @param[in] micro_batch i >= 0.
/// @return 2 i.
constexpr int activation_tag(int micro_batch) { return 2 * micro_batch; }
/// @brief The tag of micro-batch i's gradient message (Note [Deadlock-free ordering]).
/// @param[in] micro_batch i >= 0.
/// @return 2 i + 1.
constexpr int gradient_tag(int micro_batch) { return 2 * micro_batch + 1; }
/// @brief The largest micro-batch count the tags allow (the smallest MPI_TAG_UB is 32767).
inline constexpr int kMaxMicroBatches = 16383;

// ---------------------------------------------------------------------------
// Micro-batches (given)
// ---------------------------------------------------------------------------

/// @brief Rows [begin, begin + rows) of a batch.
struct RowRange {
  std::int64_t begin = 0;  ///< first row
  std::int64_t rows = 0;   ///< number of rows
};

/// @brief Micro-batch i of a batch of `batch` rows cut into m: the first batch % m
/// micro-batches get one row more than the others (given).
///
/// Example: 10 rows, m = 4: rows [0, 3), [3, 6), [6, 8), [8, 10).
/// @param[in] batch B >= 1.
/// @param[in] micro_batches m in [1, B].
/// @param[in] i in [0, m).
/// @return the rows.
/// @throws dtl::InvalidArgument naming the argument out of range.
RowRange micro_batch_rows(std::int64_t batch, int micro_batches, int i);

/// @brief A view (no copy) of rows [begin, begin + rows) of a tensor whose first
/// dimension is the batch (given).
/// @param[in] t a defined, contiguous tensor with at least one dimension.
/// @param[in] range the rows.
/// @return the view, shape (rows, t.shape()[1:]...).
/// @throws dtl::InvalidArgument if the rows are not inside t.
nn::Tensor row_view(const nn::Tensor& t, RowRange range);

/// @brief A shape with its first dimension (the batch) replaced (given).
/// @param[in] shape at least one dimension.
/// @param[in] rows the new first dimension.
/// @return the shape.
nn::Shape with_rows(nn::Shape shape, std::int64_t rows);

// ---------------------------------------------------------------------------
// Task A: balancing stages (balance.cc)
// ---------------------------------------------------------------------------

/// @brief Measures each unit's forward + backward time: `repeats` full steps
/// (forward, loss, backward) with the model's pre/post forward and backward hooks
/// timing each unit (clock_seconds()); per unit, the median over the repeats of
/// its forward time plus its backward time.
///
/// The model's hooks are restored as they were, and its gradients are zeroed
/// before returning (the measurement must not leave gradients behind).
/// @param[in,out] model the whole model (not flattened or flattened, either).
/// @param[in] x a batch of inputs.
/// @param[in] targets its targets (SoftmaxCrossEntropy).
/// @param[in] repeats >= 1 (the first run is timed too: warm up before if it matters).
/// @return unit_count() costs in seconds.
/// @throws dtl::InvalidArgument if repeats < 1.
std::vector<double> measure_unit_costs(nn::Model& model, const nn::Tensor& x, const nn::Tensor& targets,
                                       int repeats);

/// @brief Cuts units with the given costs into `stages` contiguous, non-empty
/// stages minimising the largest stage's cost (Note [Balancing stages]).
///
/// Example: costs {1, 1, 1, 4, 1}, 3 stages: bounds {0, 3, 4, 5} (stage costs 3, 4, 1;
/// nothing does better than 4).
/// @param[in] costs per unit, each >= 0.
/// @param[in] stages P in [1, costs.size()].
/// @return P + 1 bounds b: stage s is units [b[s], b[s+1]), b[0] = 0, b[P] = costs.size(),
///         strictly increasing. Among optimal cuts any may be returned.
/// @throws dtl::InvalidArgument if stages is out of range (more stages than units)
///         or a cost is negative or not finite.
std::vector<int> balance_stages(std::span<const double> costs, int stages);

/// @brief How unbalanced a cut is: the largest stage cost over the mean stage cost.
/// @param[in] costs per unit.
/// @param[in] bounds as balance_stages() returns them.
/// @return max_s cost_s / (sum / P): 1 is perfectly balanced; 0 when every cost is 0.
/// @throws dtl::InvalidArgument if bounds is malformed for costs (not starting at 0,
///         not ending at costs.size(), not strictly increasing).
double stage_imbalance(std::span<const double> costs, std::span<const int> bounds);

// ---------------------------------------------------------------------------
// Task B: schedules (schedule.cc)
// ---------------------------------------------------------------------------

/// @brief GPipe's order on stage `stage` (Note [GPipe and 1F1B]): F0 .. F(m-1), B0 .. B(m-1).
/// @param[in] stages P >= 1.
/// @param[in] stage s in [0, P).
/// @param[in] micro_batches m in [1, kMaxMicroBatches].
/// @return 2m actions.
/// @throws dtl::InvalidArgument naming the argument out of range.
std::vector<Action> gpipe_schedule(int stages, int stage, int micro_batches);

/// @brief 1F1B's order on stage `stage` (Note [GPipe and 1F1B]): a warm-up of
/// forwards, then one forward and one backward alternately until the forwards run
/// out, then the backwards that are left. Forwards in order F0 .. F(m-1), backwards
/// in order B0 .. B(m-1), each F(i) before B(i). The warm-up is the shortest that
/// keeps the stage from waiting on the later stages in the steady state (balanced
/// stages), and at most m: deriving it is the task (handout Task B). The Note's
/// worked example (P = 3, m = 4) must come out; Schedules.* checks every (P, s, m)
/// against an independent rule.
/// @param[in] stages P >= 1.
/// @param[in] stage s in [0, P).
/// @param[in] micro_batches m in [1, kMaxMicroBatches].
/// @return 2m actions.
/// @throws dtl::InvalidArgument naming the argument out of range.
std::vector<Action> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// ---------------------------------------------------------------------------
// Task D: weight stashing (stash.cc)
// ---------------------------------------------------------------------------

/// @brief The weight versions of PipeDream's asynchronous 1F1B (Note [Weight stashing]).
///
/// Holds, per micro-batch in flight, a copy of the stage's weights as its
/// forward saw them (charged to MemoryCategory::kParameters) and the version
/// number the caller gave. For one micro-batch i the calls are
///
///     save(i, v)            at F(i): copy the weights, remember v
///     begin_backward(i)     at B(i), first: the weights become the copy; the newest are kept aside
///     end_backward(i)       at B(i), last: the newest weights are back; the copy is dropped
///
/// and the optimizer updates the weights after end_backward().
class WeightStash {
 public:
  /// @brief A stash for these weights.
  /// @param[in] weights the stage's weights as one f32 tensor (usually Model::flatten_values()),
  ///            a handle: the stash writes into the same storage.
  /// @throws dtl::InvalidArgument if weights is not a defined f32 tensor.
  explicit WeightStash(nn::Tensor weights);

  /// @brief Keeps a copy of the weights for micro-batch i, with its version.
  /// @param[in] micro_batch i >= 0.
  /// @param[in] version the weights' version now (the number of updates so far).
  /// @throws dtl::InvalidArgument if i already has a copy.
  void save(int micro_batch, int version);
  /// @brief Puts micro-batch i's copy into the weights; keeps the newest weights aside.
  /// @param[in] micro_batch i, saved and not in a backward.
  /// @return the version saved with it.
  /// @throws dtl::InvalidArgument if i has no copy, or another backward has begun and not ended.
  int begin_backward(int micro_batch);
  /// @brief Puts the newest weights back (bit for bit) and drops i's copy.
  /// @param[in] micro_batch the i of the begin_backward() before.
  /// @throws dtl::InvalidArgument if i is not the micro-batch whose backward began.
  void end_backward(int micro_batch);

  /// @return the copies held now.
  int stashed() const noexcept { return static_cast<int>(count_); }
  /// @return the most copies held at once since construction.
  int peak_stashed() const noexcept { return peak_; }

 private:
  nn::Tensor weights_;
  std::vector<nn::Tensor> copies_;  // per micro-batch: its copy (undefined: none)
  std::vector<int> versions_;       // per micro-batch: the version of its copy
  nn::Tensor newest_;               // the newest weights, during a backward
  int in_backward_ = -1;            // the micro-batch whose backward began, or -1
  std::size_t count_ = 0;
  int peak_ = 0;
};

// ---------------------------------------------------------------------------
// Task C: one stage of the pipeline (stage.cc)
// ---------------------------------------------------------------------------

/// @brief How a PipelineStage runs.
struct PipelineOptions {
  int micro_batches = 1;        ///< m, in [1, min(batch, kMaxMicroBatches)]
  bool checkpoint = false;      ///< recompute the forward in backward (Note [Activation checkpointing])
  Timeline* timeline = nullptr;  ///< if set, each F and B is a span on track "compute" (name "F3", "B3")
  /// PipeDream's asynchronous mode (Note [Weight stashing]): if set, called right
  /// after each backward, with its micro-batch (the caller updates the weights
  /// there and zeroes the gradients); every call raises the weight version by one.
  std::function<void(int micro_batch)> after_backward;
  WeightStash* stash = nullptr;  ///< if set, save() at each F, begin/end_backward() around each B
  /// If set, the stage's messages go through it (not owned; it must span the pipeline's
  /// ranks, rank s = stage s, and outlive the stage): a dtl::NcclPeerLink on a GPU
  /// (Note [A stage on a GPU]). If null, the stage makes a dtl::MpiPeerLink on `pipeline`.
  PeerLink* link = nullptr;
};

/// @brief One forward or backward as the stage ran it.
struct Event {
  Pass pass = Pass::kForward;  ///< F or B
  int micro_batch = 0;      ///< which micro-batch
  int version = 0;          ///< the weight version it computed with (asynchronous mode; 0 otherwise)
  double begin_seconds = 0.0;  ///< clock_seconds() when its compute began (after its receive completed)
  double end_seconds = 0.0;    ///< clock_seconds() when its compute ended
};

/// @brief One stage of a pipeline: runs a schedule of forwards and backwards,
/// receiving activations from the previous stage and gradients from the next.
///
/// Per step, every stage of the pipeline calls train_step() with its schedule:
///
///     stage.train_step(x, targets, one_f_one_b_schedule(P, s, m));   // grads accumulated
///     optimizer.step(values, grads);                                 // one step per batch
///
/// Stage s is rank s of `pipeline`; its model holds units [stage.begin, stage.end)
/// of the whole model (Model::slice()). Stage 0 reads x, the last stage reads
/// targets and computes SoftmaxCrossEntropy's mean loss over the batch; the
/// gradients are those of that mean, accumulated over the micro-batches
/// (micro-batch i's loss gradient is scaled by rows_i / B), so the step equals
/// one process on the whole batch. Not copyable or movable.
class PipelineStage {
 public:
  /// @brief Sets up stage `pipeline`'s rank.
  ///
  /// Checks the arguments first (the same on every rank, so every rank throws),
  /// then duplicates `pipeline` (collective: every rank of it must construct its stage together).
  /// @param[in] pipeline the P ranks of this pipeline, rank s = stage s.
  /// @param[in] model this stage's units (f32).
  /// @param[in] stage where the units are in the whole model, and the activation
  ///            shapes at the stage's edges for the whole batch (first dimension B).
  /// @param[in] options micro-batches, checkpointing, timeline, asynchronous mode.
  /// @throws dtl::InvalidArgument naming the argument (and the rank) if the model
  ///         does not hold stage.end - stage.begin units, is not f32, or
  ///         micro_batches is not in [1, min(B, kMaxMicroBatches)].
  PipelineStage(MPI_Comm pipeline, nn::Model model, const nn::Stage& stage, PipelineOptions options = {});
  /// @brief Cancels receives still posted and frees sends still in flight (only after an exception).
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  /// @brief Runs one batch: this stage's schedule, in order. Zeroes the gradients
  /// first (asynchronous mode aside: the caller zeroes in after_backward), leaves
  /// them accumulated over the micro-batches, and returns after every send completed.
  ///
  /// Collective over the pipeline: every stage calls it with its own schedule.
  /// @param[in] x the whole batch's input (read on stage 0 only; others may pass any tensor).
  /// @param[in] targets the whole batch's targets (read on the last stage only).
  /// @param[in] schedule this stage's actions: each micro-batch of [0, m) exactly once
  ///            as F and once as B, its F first.
  /// @return the batch's mean loss on the last stage; 0 on the others.
  /// @throws dtl::InvalidArgument naming "schedule" and the first bad action, before
  ///         any communication, if it is not such a schedule; naming x or targets if
  ///         their first dimension is not B (on the stage that reads them).
  double train_step(const nn::Tensor& x, const nn::Tensor& targets, std::span<const Action> schedule);

  /// @return the forwards and backwards of the last train_step(), in the order they ran.
  const std::vector<Event>& events() const noexcept { return events_; }
  /// @return this stage's model.
  nn::Model& model() noexcept { return model_; }
  /// @return s, this stage's index (its rank in the pipeline).
  int stage() const noexcept { return stage_; }
  /// @return P, the number of stages.
  int stages() const noexcept { return stages_; }
  /// @return the weight version: the number of after_backward() calls so far.
  int version() const noexcept { return version_; }

 private:
  /// @brief A posted receive or a send in flight: its buffer (kCommunication) and its Work.
  struct Pending {
    nn::Tensor buffer;     ///< what is received into, or the copy that is sent
    Work work;             ///< the link's operation on it; completed() once waited for
    bool posted = false;   ///< a receive: posted in this step (it is never posted twice)
  };
  void check_schedule(std::span<const Action> schedule) const;
  void post_receives(std::span<const Action> schedule, std::size_t k);
  void post_receive(const Action& action);
  nn::Tensor wait_receive(const Action& action);
  void send(const nn::Tensor& t, int peer, int tag);
  void test_sends();
  void wait_sends();
  void forward(int i, const nn::Tensor& x, const nn::Tensor& targets);
  void backward(int i);

  std::unique_ptr<PeerLink> own_link_;  // the MpiPeerLink made when options.link is null
  PeerLink* link_ = nullptr;            // the messages' link: options.link or own_link_
  nn::Device device_ = nn::Device::kCpu;  // where the model's parameters are: buffers go there too
  nn::Model model_;
  nn::Stage stage_info_;
  PipelineOptions options_;
  int stage_ = 0, stages_ = 1;
  std::int64_t batch_ = 0;
  int version_ = 0;
  nn::SoftmaxCrossEntropy loss_;
  double step_loss_ = 0.0;
  std::vector<Pending> activation_recv_, gradient_recv_;  // per micro-batch
  std::vector<nn::Tensor> inputs_;                        // per micro-batch: its forward's input
  std::vector<nn::Tensor> loss_grads_;                    // per micro-batch, last stage: dL/dlogits
  std::vector<Pending> sends_;                            // in flight: the copy and its request
  std::vector<Event> events_;
};

// ---------------------------------------------------------------------------
// Task E: pipeline x data parallel (grid.cc): Grid, make_grid() and
// allreduce_data_parallel_gradients() are declared in lab07/grid.h (lab 08 builds
// its tensor x data grid on them).
// ---------------------------------------------------------------------------

}  // namespace dtl::lab07
