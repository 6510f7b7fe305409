/// @file
/// @brief Lab 07, task F: Megatron's interleaved 1F1B, v chunks of layers per rank
/// (interleaved_schedule(), yours in src/interleave.cc) and the given executor of
/// a rank's chunks (InterleavedStage, given/interleaved_stage.cc). The schedule is
/// data, Actions with a chunk, as GPipe's and 1F1B's are (lab07/pipeline.h).
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/tensor.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

// Note [Interleaving]
// ~~~~~~~~~~~~~~~~~~~
// Megatron-LM's interleaved 1F1B (Narayanan et al., 2021, section 2.2) gives each
// of the P ranks v smaller stages ("chunks", "virtual stages") that are not
// adjacent: the model is cut into V = v P virtual stages, and chunk c of rank s
// is virtual stage k = c P + s. P = 2, v = 2: rank 0 holds virtual stages 0 and 2,
// rank 1 holds 1 and 3. A micro-batch crosses every rank v times, each time doing
// 1/v of that rank's work, and its activation wraps from rank P - 1 (chunk c) to
// rank 0 (chunk c + 1). The fill and drain are made of chunk-sized ops, so they
// shrink by v: with t_f and t_b a whole rank's forward and backward of one
// micro-batch (all its chunks), each rank idles for
//
//     (P - 1)(t_f + t_b) / v          against 1F1B's (P - 1)(t_f + t_b),
//
// out of m (t_f + t_b) of work: bubble = (P - 1) / (v m + P - 1) of the step
// (the paper states the idle-over-work ratio (P - 1)/(v m)). The price: about v times the
// point-to-point messages (2 (v P - 1) per micro-batch instead of 2 (P - 1)), and
// a longer warm-up, so more micro-batches in flight on the first ranks.
//
// The order on rank s (interleaved_schedule()): the micro-batches go in groups of
// P; a rank runs a group's forwards through chunk 0, then the same group through
// chunk 1, ..., chunk v - 1, then the next group. Backwards go the same way with
// the chunks reversed (v - 1 first). After a warm-up of forwards, one forward
// and one backward alternate, then the remaining backwards run (1F1B's shape).
// With v > 1 the warm-up is Megatron's, (v - 1) P + 2 (P - 1 - s) forwards (at
// most v m): enough for the first group to pass every earlier chunk and for its
// first backward to come back. Rank s then holds at most that many + 1
// (micro-batch, chunk) pairs in flight, v m at most. With v = 1 the order is
// one_f_one_b_schedule()'s.
//
// Which chunk and micro-batch a rank's k-th forward and k-th backward are is
// task F (handout, Task F).
//
// The rule for m: with v > 1, m must be a multiple of P (Megatron asserts the
// same). The order above walks the micro-batches in whole groups of P through
// every chunk; with a partial last group it would have to switch to another rule
// for the remainder (later Megatron versions do), and the warm-up above would no
// longer be what keeps rank 0's chunk c + 1 from waiting on rank P - 1. We refuse
// such m rather than define a second order; v = 1 (1F1B) takes any m.
//
// Zero-bubble schedules (Qi et al., 2023) go further by splitting each backward
// into its input gradient (needed by the previous stage at once) and its weight
// gradient (which can wait and fill the bubble): Note [Zero bubble] in
// lab07/zero_bubble.h, task G, run by this same executor with one chunk.

// ---------------------------------------------------------------------------
// Task F: interleaved 1F1B (interleave.cc)
// ---------------------------------------------------------------------------

/// @brief The order of work on rank `stage` of Megatron's interleaved 1F1B with
/// `chunks` chunks per rank (Note [Interleaving]).
///
/// Invariants of the result (what the tests check): every (micro-batch, chunk)
/// pair appears exactly once as F and once as B; on each chunk the forwards run
/// in micro-batch order, and so do the backwards; run by all P ranks at once, the
/// orders never wait in a cycle (F of virtual stage k needs F of k - 1, B of k
/// needs F of k and B of k + 1), and with balanced chunk ops (every F t_f, every B
/// t_b) the bubble is (P - 1)/(v m + P - 1). The warm-up is Megatron's (Note
/// [Interleaving]), then F/B alternate, then the cool-down, so at most the warm-up
/// + 1 pairs are in flight. chunks = 1 is one_f_one_b_schedule() exactly (every
/// chunk 0, any m).
/// @param[in] stages P >= 1.
/// @param[in] stage s in [0, P).
/// @param[in] micro_batches m in [1, kMaxMicroBatches], a multiple of P when chunks > 1.
/// @param[in] chunks v >= 1, with v m <= kMaxMicroBatches.
/// @return 2 v m actions, each with its chunk.
/// @throws dtl::InvalidArgument naming the argument: stages, stage or chunks out of
///         range, micro_batches out of range or (chunks > 1) not a multiple of stages.
std::vector<Action> interleaved_schedule(int stages, int stage, int micro_batches, int chunks);

/// @brief The v chunks of one rank of an interleaved pipeline, and the executor
/// of their schedule (given: interleaved_stage.cc).
///
/// Chunk c of rank s is virtual stage k = c P + s of V = v P. Each op of the
/// schedule runs on its chunk's model (slot = its micro-batch); activations go
/// to the rank of k + 1 (from P - 1 that is rank 0, chunk c + 1), gradients to
/// the rank of k - 1, with MPI_Isend; every receive of a step is posted when it
/// starts, tag 2 (k m + i) for micro-batch i's activation into virtual stage k and
/// 2 (k m + i) + 1 for its gradient into virtual stage k (from k + 1). Losses and
/// gradients are PipelineStage's: the mean over the batch, accumulated over
/// micro-batches.
class InterleavedStage {
 public:
  /// @brief Sets up rank `pipeline`'s chunks (collective: duplicates `pipeline`).
  /// @param[in] pipeline the P ranks, rank s holds chunks c of virtual stages c P + s.
  /// @param[in] chunks v models, chunk c holding units [stages[c].begin, stages[c].end).
  /// @param[in] stages v stage descriptions, edge shapes for the whole batch.
  /// @param[in] micro_batches m in [1, B], with v P m <= kMaxMicroBatches (the tags).
  /// @throws dtl::InvalidArgument naming the argument if chunks and stages differ in
  ///         length or are empty, a model holds the wrong number of units, or m is out of range.
  InterleavedStage(MPI_Comm pipeline, std::vector<nn::Model> chunks, std::vector<nn::Stage> stages, int micro_batches);
  /// @brief Cancels the receives an exception left pending and frees their sends (as PipelineStage does).
  ~InterleavedStage();
  InterleavedStage(const InterleavedStage&) = delete;
  InterleavedStage& operator=(const InterleavedStage&) = delete;

  /// @brief Runs one batch: zeroes every chunk's gradients, runs the schedule, leaves
  /// the gradients accumulated, returns after every send completed. Collective.
  ///
  /// A schedule with W actions (zb_h1_schedule(), lab07/zero_bubble.h) splits each
  /// backward: B runs Model::backward_input() and sends dx, W runs
  /// Model::backward_weight(), and the slot is released after W. The gradients are
  /// the fused backward's bit for bit when the W's run in the B's order.
  /// @param[in] x the whole batch's input (read by virtual stage 0: rank 0, chunk 0).
  /// @param[in] targets the whole batch's targets (read by virtual stage V - 1).
  /// @param[in] schedule this rank's actions: each (micro-batch, chunk) once as F and once as B, F first;
  ///            and either no W, or each pair once as W after its B.
  /// @return the batch's mean loss on rank P - 1; 0 on the others.
  /// @throws dtl::InvalidArgument naming "schedule" before any communication if it is not such a schedule.
  double train_step(const nn::Tensor& x, const nn::Tensor& targets, std::span<const Action> schedule);

  /// @param[in] chunk c in [0, v).
  /// @return chunk c's model.
  nn::Model& model(int chunk) { return chunks_.at(static_cast<std::size_t>(chunk)); }
  /// @return v.
  int chunks() const noexcept { return static_cast<int>(chunks_.size()); }
  /// @return the point-to-point messages this rank sent in the last train_step().
  std::int64_t messages_sent() const noexcept { return messages_sent_; }

 private:
  /// @brief A posted receive: its buffer (kCommunication) and request.
  struct Pending {
    nn::Tensor buffer;                       ///< what is received into
    MPI_Request request = MPI_REQUEST_NULL;  ///< its request; MPI_REQUEST_NULL once complete
  };
  std::size_t receive_index(int chunk, int micro_batch, bool activation) const {
    return 2 * (static_cast<std::size_t>(chunk) * static_cast<std::size_t>(micro_batches_) +
                static_cast<std::size_t>(micro_batch)) + (activation ? 0 : 1);
  }
  void post_receive(int virtual_stage, int micro_batch, bool activation);
  nn::Tensor wait_receive(int chunk, int micro_batch, bool activation);
  void send(const nn::Tensor& t, int virtual_stage, int micro_batch, bool activation);

  Comm comm_;
  std::vector<nn::Model> chunks_;
  std::vector<nn::Stage> stages_;
  int micro_batches_ = 1;
  int rank_ = 0, ranks_ = 1;
  std::int64_t batch_ = 0;
  std::int64_t messages_sent_ = 0;
  nn::SoftmaxCrossEntropy loss_;
  std::vector<nn::Tensor> loss_grads_;  // per micro-batch, virtual stage V - 1: dL/dlogits
  std::vector<Pending> receives_;       // per (chunk, micro-batch, direction): receive_index()
  std::vector<nn::Tensor> sends_buffers_;
  std::vector<MPI_Request> sends_;
};

}  // namespace dtl::lab07
