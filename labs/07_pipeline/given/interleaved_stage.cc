// Lab 07, given (not a task; compiled into both builds): the executor of an
// interleaved pipeline, the v chunks of one rank (InterleavedStage). It is
// PipelineStage's executor (src/stage.cc) with the one thing virtual stages add:
// every op names its chunk, and the chunk decides whose model runs and who the
// neighbours are. See Note [Interleaving] in lab07/pipeline.h.
//
// Chunk c of rank s is virtual stage k = c P + s. For micro-batch i:
//
//     virtual stage k - 1  --activation, tag 2 (k m + i)-->      virtual stage k
//     virtual stage k      <--gradient,  tag 2 (k m + i) + 1--   virtual stage k + 1
//
// and the rank of virtual stage k is k mod P: the activation out of rank P - 1's
// chunk c wraps to rank 0's chunk c + 1. Sends are MPI_Isend from a copy kept
// until the step ends; every receive of the step is posted when it starts, and
// an op waits only on its own. That is enough for any schedule that does not wait
// in a cycle (the tests check interleaved_schedule() with a simulator): a send
// never blocks, so a rank only ever waits for an op another rank runs earlier in
// its own order. Posting all receives at once costs v m buffers per direction
// (PipelineStage posts only the next ones), and buys the shortest code and a
// message moved the moment it is sent (a receive posted only when its op is next
// made each hop above the eager limit wait for the sender's next MPI call).
//
// A schedule with W actions (ZB-H1, Note [Zero bubble] in lab07/zero_bubble.h)
// splits every backward: B is the model's backward_input(), whose dx is sent
// at once, W its backward_weight() later, and the micro-batch's slot is
// released after its W (Note [Split backward] in harness/nn/layer_interface.h).
#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab07/interleave.h"

namespace dtl::lab07 {

InterleavedStage::InterleavedStage(MPI_Comm pipeline, std::vector<nn::Model> chunks, std::vector<nn::Stage> stages,
                                   int micro_batches)
    : chunks_(std::move(chunks)), stages_(std::move(stages)), micro_batches_(micro_batches) {
  // Every check depends only on arguments every rank has: a bad one throws on
  // every rank before the collective duplicate.
  const auto [rank, size] = rank_and_size(pipeline);
  DTL_REQUIRE_ARG(!chunks_.empty() && chunks_.size() == stages_.size(), "InterleavedStage", "chunks",
                  "holds " + std::to_string(chunks_.size()) + " models for " + std::to_string(stages_.size()) +
                      " stages; they must be the same number, at least 1");
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const nn::Stage& st = stages_[c];
    DTL_REQUIRE_ARG(chunks_[c].unit_count() == st.end - st.begin && st.end > st.begin, "InterleavedStage", "chunks",
                    "chunk " + std::to_string(c) + " holds " + std::to_string(chunks_[c].unit_count()) +
                        " units; its stage needs " + std::to_string(st.end - st.begin) + " (at least 1)");
    DTL_REQUIRE_ARG(chunks_[c].dtype() == nn::DType::kF32, "InterleavedStage", "chunks", "must compute in f32");
    DTL_REQUIRE_ARG(!st.input_shape.empty() && !st.output_shape.empty(), "InterleavedStage", "stages",
                    "chunk " + std::to_string(c) + " has no edge shapes");
  }
  batch_ = stages_.front().input_shape[0];
  const long long virtual_stages = static_cast<long long>(chunks_.size()) * size;
  DTL_REQUIRE_ARG(micro_batches_ >= 1 && micro_batches_ <= batch_ &&
                      virtual_stages * micro_batches_ <= kMaxMicroBatches,
                  "InterleavedStage", "micro_batches",
                  "is " + std::to_string(micro_batches_) + "; it must be in [1, " + std::to_string(batch_) +
                      "] with chunks * ranks * micro_batches <= " + std::to_string(kMaxMicroBatches));
  comm_ = Comm(pipeline);
  rank_ = rank;
  ranks_ = size;
}

InterleavedStage::~InterleavedStage() {
  // Only after an exception can requests still be pending: receives are
  // cancelled; sends freed, their buffers deliberately leaked (MPI may still
  // read them), as in PipelineStage.
  for (Pending& p : receives_) {
    if (p.request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&p.request);
    MPI_Wait(&p.request, MPI_STATUS_IGNORE);
  }
  for (std::size_t k = 0; k < sends_.size(); ++k) {
    if (sends_[k] == MPI_REQUEST_NULL) continue;
    MPI_Request_free(&sends_[k]);
    new nn::Tensor(std::move(sends_buffers_[k]));  // NOLINT: leaked on purpose
  }
}

// The tag of micro-batch i's message into virtual stage k (activation) or
// into k from k + 1 (gradient): distinct for every (k, i, direction).
static int interleaved_tag(int virtual_stage, int micro_batches, int micro_batch, bool activation) {
  return 2 * (virtual_stage * micro_batches + micro_batch) + (activation ? 0 : 1);
}

void InterleavedStage::post_receive(int virtual_stage, int micro_batch, bool activation) {
  const int chunk = virtual_stage / ranks_;
  const nn::Stage& st = stages_[static_cast<std::size_t>(chunk)];
  const RowRange rows = micro_batch_rows(batch_, micro_batches_, micro_batch);
  Pending& p = receives_[receive_index(chunk, micro_batch, activation)];
  p.buffer = nn::Tensor::zeros(with_rows(activation ? st.input_shape : st.output_shape, rows.rows), nn::DType::kF32,
                               nn::MemoryCategory::kCommunication);
  const int source = (activation ? virtual_stage - 1 : virtual_stage + 1) % ranks_;
  DTL_MPI_CHECK(MPI_Irecv(p.buffer.raw(), static_cast<int>(p.buffer.numel()), MPI_FLOAT, source,
                          interleaved_tag(virtual_stage, micro_batches_, micro_batch, activation), comm_, &p.request));
}

nn::Tensor InterleavedStage::wait_receive(int chunk, int micro_batch, bool activation) {
  Pending& p = receives_[receive_index(chunk, micro_batch, activation)];
  DTL_MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE));
  return std::exchange(p.buffer, nn::Tensor());
}

void InterleavedStage::send(const nn::Tensor& t, int virtual_stage, int micro_batch, bool activation) {
  // An activation goes into virtual stage k + 1, a gradient into k - 1.
  const int to = activation ? virtual_stage + 1 : virtual_stage - 1;
  sends_buffers_.push_back(t.clone(nn::MemoryCategory::kCommunication));
  sends_.push_back(MPI_REQUEST_NULL);
  DTL_MPI_CHECK(MPI_Isend(sends_buffers_.back().raw(), static_cast<int>(sends_buffers_.back().numel()), MPI_FLOAT,
                          to % ranks_, interleaved_tag(to, micro_batches_, micro_batch, activation), comm_,
                          &sends_.back()));
  ++messages_sent_;
}

double InterleavedStage::train_step(const nn::Tensor& x, const nn::Tensor& targets, std::span<const Action> schedule) {
  const int v = chunks(), m = micro_batches_;
  const int last = v * ranks_ - 1;  // the last virtual stage: it computes the loss
  // The schedule: each (micro-batch, chunk) once as F and once as B, F first; and
  // either no W at all (the fused backward) or each pair once as W, after its B.
  // state per pair: 0 nothing yet, 1 F ran, 2 B ran, 3 W ran.
  std::vector<char> state(static_cast<std::size_t>(v) * static_cast<std::size_t>(m), 0);
  std::size_t weights = 0;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const Action& a = schedule[k];
    const bool ok_ids = a.micro_batch >= 0 && a.micro_batch < m && a.chunk >= 0 && a.chunk < v;
    char& st = ok_ids ? state[static_cast<std::size_t>(a.chunk * m + a.micro_batch)] : state[0];
    const char before = a.pass == Pass::kForward ? 0 : a.pass == Pass::kBackward ? 1 : a.pass == Pass::kWeight ? 2 : -1;
    DTL_REQUIRE_ARG(ok_ids && st == before, "InterleavedStage::train_step", "schedule",
                    "action " + std::to_string(k) + " (" + schedule_string(schedule.subspan(k, 1)) +
                        ") is out of range, repeated, a B before its F or a W before its B");
    ++st;
    if (a.pass == Pass::kWeight) ++weights;
  }
  const bool split = weights > 0;  // B and W apart (Note [Zero bubble])
  DTL_REQUIRE_ARG(schedule.size() == (split ? 3 : 2) * state.size(), "InterleavedStage::train_step", "schedule",
                  "has " + std::to_string(schedule.size()) + " actions; it needs " + std::to_string(2 * state.size()) +
                      " (F and B of each micro-batch and chunk) or " + std::to_string(3 * state.size()) +
                      " (F, B and W)");

  for (nn::Model& model : chunks_) model.zero_grad();
  loss_grads_.assign(static_cast<std::size_t>(m), nn::Tensor());
  // Every receive of the step: an activation into each chunk but virtual stage 0's,
  // a gradient into each chunk but the last virtual stage's.
  receives_.assign(2 * state.size(), Pending{});
  for (const Action& a : schedule) {
    const int k = a.chunk * ranks_ + rank_;
    if (a.pass == Pass::kForward && k > 0) post_receive(k, a.micro_batch, true);
    if (a.pass == Pass::kBackward && k < last) post_receive(k, a.micro_batch, false);
  }
  std::vector<nn::Tensor> inputs(state.size());
  double step_loss = 0.0;
  messages_sent_ = 0;
  for (const Action& a : schedule) {
    const int i = a.micro_batch, c = a.chunk, k = c * ranks_ + rank_;
    nn::Model& model = chunks_[static_cast<std::size_t>(c)];
    model.set_slot(i);
    if (a.pass == Pass::kForward) {
      const RowRange rows = micro_batch_rows(batch_, m, i);
      const nn::Tensor input = k == 0 ? row_view(x, rows) : wait_receive(c, i, true);
      const nn::Tensor& y = model.forward(input);
      if (k == last) {
        const double share = static_cast<double>(rows.rows) / static_cast<double>(batch_);
        step_loss += share * loss_.forward(y, row_view(targets, rows));
        loss_grads_[static_cast<std::size_t>(i)] = loss_.backward(share).clone(nn::MemoryCategory::kCommunication);
      } else {
        send(y, k, i, true);
      }
      inputs[static_cast<std::size_t>(c * m + i)] = input;
    } else if (a.pass == Pass::kBackward) {
      const nn::Tensor dy =
          k == last ? std::exchange(loss_grads_[static_cast<std::size_t>(i)], nn::Tensor()) : wait_receive(c, i, false);
      // Split: B only; the slot keeps what W reads (x, dy) until W releases it.
      const nn::Tensor& dx = split ? model.backward_input(dy) : model.backward(dy);
      if (k > 0) send(dx, k, i, false);
      if (!split) model.release_slot(i);
      inputs[static_cast<std::size_t>(c * m + i)] = nn::Tensor();
    } else {
      model.backward_weight();  // nothing to send: no other stage waits for a W
      model.release_slot(i);
    }
  }
  if (!sends_.empty()) {
    DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE));
  }
  sends_.clear();
  sends_buffers_.clear();
  return rank_ == last % ranks_ ? step_loss : 0.0;
}

}  // namespace dtl::lab07
