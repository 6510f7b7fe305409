// Lab 07, task C: one stage of a pipeline, running a schedule.
//
// What this file teaches: the executor every pipeline schedule shares. It knows
// nothing about GPipe or 1F1B: it runs a list of F(i) and B(i) in order. What it
// must get right is the plumbing between stages:
//
//   - point-to-point only with its two neighbours, nonblocking, each message
//     tagged with its micro-batch and direction (See Note [Deadlock-free ordering]);
//   - one activation slot per micro-batch in flight, released by its backward
//     (See Note [Activation slots]);
//   - the gradients of the batch's mean loss, accumulated over micro-batches
//     (micro-batch i's loss gradient scaled by rows_i / B);
//   - optionally: recompute the forward in backward (See Note [Activation
//     checkpointing]) and stash weights (See Note [Weight stashing]).
//
// Stage s of P, and who talks to whom for micro-batch i:
//
//     stage s-1  --activation, tag 2i-->  stage s  --activation, tag 2i-->  stage s+1
//     stage s-1  <--gradient, tag 2i+1--  stage s  <--gradient, tag 2i+1--  stage s+1
//
// With m = 1 and GPipe's order this is naive model parallelism: one batch goes
// through the stages one after another and back, and only one stage works at a time.
#include <mpi.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

void PipelineStage::post_receive(const Action& action) {
  const int i = action.micro_batch;
  const bool forward = action.pass == Pass::kForward;
  // Stage 0 reads its input from x; the last stage makes its gradient from the loss.
  if (forward ? stage_ == 0 : stage_ == stages_ - 1) return;
  Pending& p = (forward ? activation_recv_ : gradient_recv_)[static_cast<std::size_t>(i)];
  if (p.posted) return;
  // BEGIN SOLUTION(PipelineStage::post_receive)
  // | Post the nonblocking receive (link_->irecv()) of this action's message into a new
  // | kCommunication f32 buffer on the model's device (device_) of the right shape for
  // | micro-batch i's rows (an activation: the stage's input shape; a gradient: its output
  // | shape), from the neighbour that sends it, on its tag (activation_tag(i),
  // | gradient_tag(i)); keep its Work and mark it posted (Note [Deadlock-free ordering],
  // | handout Task C).
  const RowRange rows = micro_batch_rows(batch_, options_.micro_batches, i);
  const nn::Shape& shape = forward ? stage_info_.input_shape : stage_info_.output_shape;
  p.buffer = nn::Tensor::zeros(with_rows(shape, rows.rows), nn::DType::kF32, nn::MemoryCategory::kCommunication,
                               device_);
  const int source = forward ? stage_ - 1 : stage_ + 1;
  const int tag = forward ? activation_tag(i) : gradient_tag(i);
  p.work = link_->irecv(p.buffer.raw(), static_cast<std::size_t>(p.buffer.numel()), nn::DType::kF32, source, tag);
  p.posted = true;
  // END SOLUTION
}

void PipelineStage::post_receives(std::span<const Action> schedule, std::size_t k) {
  // BEGIN SOLUTION(PipelineStage::post_receives)
  // | Before action k runs: its own receive is posted (required: wait_receive() waits on it),
  // | and so are the receives of the next forward and the next backward after k in
  // | `schedule` (one of each kind ahead, no more: each posted receive holds a buffer). Since
  // | every send is an isend() completed only at the end of the step, how far ahead does
  // | not decide correctness, only how early a message can land (Note [Deadlock-free
  // | ordering]). post_receive() ignores a receive already posted.
  post_receive(schedule[k]);
  bool next_forward = false, next_backward = false;
  for (std::size_t j = k + 1; j < schedule.size() && !(next_forward && next_backward); ++j) {
    bool& done = schedule[j].pass == Pass::kForward ? next_forward : next_backward;
    if (done) continue;
    post_receive(schedule[j]);
    done = true;
  }
  // END SOLUTION
}

nn::Tensor PipelineStage::wait_receive(const Action& action) {
  Pending& p =
      (action.pass == Pass::kForward ? activation_recv_ : gradient_recv_)[static_cast<std::size_t>(action.micro_batch)];
  // BEGIN SOLUTION(PipelineStage::wait_receive)
  // | Block until the posted receive of this action completes (this is where a stage idles in
  // | the bubble) and return its buffer; the Pending keeps no handle to it. Only after the wait
  // | may the buffer be read (Note [A stage on a GPU]).
  p.work.wait();
  return std::exchange(p.buffer, nn::Tensor());
  // END SOLUTION
}

void PipelineStage::send(const nn::Tensor& t, int peer, int tag) {
  // BEGIN SOLUTION(PipelineStage::send)
  // | Send t to peer with `tag` without blocking (link_->isend()), from a kCommunication copy
  // | of its own (the layer may overwrite or free t before the send completes); keep copy and
  // | Work in sends_ until the send completes (Note [Deadlock-free ordering], Note [A stage
  // | on a GPU]).
  Pending p;
  p.buffer = t.clone(nn::MemoryCategory::kCommunication);
  p.work = link_->isend(p.buffer.raw(), static_cast<std::size_t>(p.buffer.numel()), nn::DType::kF32, peer, tag);
  sends_.push_back(std::move(p));
  // END SOLUTION
}

void PipelineStage::test_sends() {
  // BEGIN SOLUTION(PipelineStage::test_sends)
  // | Drop (and so free) every send in sends_ that has completed; never block.
  std::vector<Pending> still;
  for (Pending& p : sends_) {
    if (!p.work.test()) still.push_back(std::move(p));
  }
  sends_ = std::move(still);
  // END SOLUTION
}

void PipelineStage::wait_sends() {
  // BEGIN SOLUTION(PipelineStage::wait_sends)
  // | Return once every send in sends_ has completed, with sends_ empty.
  for (Pending& p : sends_) p.work.wait();
  sends_.clear();
  // END SOLUTION
}

// ---------------------------------------------------------------------------
// Forward and backward of one micro-batch
// ---------------------------------------------------------------------------

void PipelineStage::forward(int i, const nn::Tensor& x, const nn::Tensor& targets) {
  const RowRange rows = micro_batch_rows(batch_, options_.micro_batches, i);
  Event event{Pass::kForward, i, version_, 0.0, 0.0};
  // BEGIN SOLUTION(PipelineStage::forward)
  // | Run F(i) on this stage (handout Task C): its input is micro-batch i's rows of x on
  // | stage 0 (no copy), else the activation received from stage s-1. The compute is timed
  // | into `event`; it uses activation slot i (Note [Activation slots]) and, with
  // | options_.stash, saves the weights for micro-batch i first (Note [Weight stashing]). On
  // | the last stage, add this micro-batch's loss to the step's loss weighted by rows / B and
  // | keep its loss gradient, scaled by rows / B, for B(i) (Note [GPipe and 1F1B]). Other
  // | stages send the output to s+1 with activation_tag(i). Keep the input until B(i); with
  // | options_.checkpoint release the slot now (Note [Activation checkpointing]).
  const nn::Tensor input = stage_ == 0 ? row_view(x, rows) : wait_receive({Pass::kForward, i});
  event.begin_seconds = clock_seconds();
  if (options_.stash != nullptr) options_.stash->save(i, version_);
  model_.set_slot(i);
  const nn::Tensor& y = model_.forward(input);
  if (stage_ == stages_ - 1) {
    const double share = static_cast<double>(rows.rows) / static_cast<double>(batch_);
    step_loss_ += share * loss_.forward(y, row_view(targets, rows));
    loss_grads_[static_cast<std::size_t>(i)] = loss_.backward(share).clone(nn::MemoryCategory::kCommunication);
  }
  event.end_seconds = clock_seconds();
  if (stage_ < stages_ - 1) send(y, stage_ + 1, activation_tag(i));
  inputs_[static_cast<std::size_t>(i)] = input;
  if (options_.checkpoint) model_.release_slot(i);
  // END SOLUTION
  events_.push_back(event);
  if (options_.timeline != nullptr) {
    options_.timeline->add("compute", "F" + std::to_string(i), event.begin_seconds, event.end_seconds,
                           {{"micro_batch", std::to_string(i)}, {"stage", std::to_string(stage_)}});
  }
}

void PipelineStage::backward(int i) {
  Event event{Pass::kBackward, i, version_, 0.0, 0.0};
  // BEGIN SOLUTION(PipelineStage::backward)
  // | Run B(i) on this stage (handout Task C): its output gradient is the kept loss gradient
  // | on the last stage, else the one received from s+1. The compute is timed into `event`,
  // | runs in slot i with micro-batch i's stashed weights when options_.stash (the event's
  // | version is the stash's), and with options_.checkpoint recomputes the forward from the
  // | kept input first. Gradients accumulate over the micro-batches. Stage s > 0 sends dx to
  // | s-1 with gradient_tag(i). Afterwards nothing of micro-batch i is kept (slot released,
  // | input and loss gradient dropped, stash ended).
  const std::size_t k = static_cast<std::size_t>(i);
  const nn::Tensor dy = stage_ == stages_ - 1 ? std::exchange(loss_grads_[k], nn::Tensor())
                                              : wait_receive({Pass::kBackward, i});
  event.begin_seconds = clock_seconds();
  if (options_.stash != nullptr) event.version = options_.stash->begin_backward(i);
  model_.set_slot(i);
  if (options_.checkpoint) model_.forward(inputs_[k]);
  const nn::Tensor& dx = model_.backward(dy);
  event.end_seconds = clock_seconds();
  if (stage_ > 0) send(dx, stage_ - 1, gradient_tag(i));
  model_.release_slot(i);
  inputs_[k] = nn::Tensor();
  if (options_.stash != nullptr) options_.stash->end_backward(i);
  // END SOLUTION
  events_.push_back(event);
  if (options_.timeline != nullptr) {
    options_.timeline->add("compute", "B" + std::to_string(i), event.begin_seconds, event.end_seconds,
                           {{"micro_batch", std::to_string(i)}, {"stage", std::to_string(stage_)}});
  }
  // PipeDream's asynchronous mode: the caller updates the weights now.
  if (options_.after_backward) {
    options_.after_backward(i);
    ++version_;
  }
}

// ---------------------------------------------------------------------------
// One step
// ---------------------------------------------------------------------------

double PipelineStage::train_step(const nn::Tensor& x, const nn::Tensor& targets, std::span<const Action> schedule) {
  check_schedule(schedule);
  if (stage_ == 0) {
    DTL_REQUIRE_ARG(x.defined() && x.ndim() >= 1 && x.shape()[0] == batch_, "PipelineStage::train_step", "x",
                    "must have the batch's " + std::to_string(batch_) + " rows on stage 0");
  }
  if (stage_ == stages_ - 1) {
    DTL_REQUIRE_ARG(targets.defined() && targets.ndim() >= 1 && targets.shape()[0] == batch_,
                    "PipelineStage::train_step", "targets",
                    "must have the batch's " + std::to_string(batch_) + " rows on the last stage");
  }
  const auto m = static_cast<std::size_t>(options_.micro_batches);
  events_.clear();
  step_loss_ = 0.0;
  if (!options_.after_backward) model_.zero_grad();
  activation_recv_ = std::vector<Pending>(m);  // Pending is move-only (its Work)
  gradient_recv_ = std::vector<Pending>(m);
  inputs_.assign(m, nn::Tensor());
  loss_grads_.assign(m, nn::Tensor());
  // BEGIN SOLUTION(PipelineStage::train_step)
  // | Run the schedule's actions in order, forwards through forward() and backwards through
  // | backward() (which add the loss into step_loss_, returned below on the last stage), with
  // | every message's receive posted in time (post_receives()) and completed sends freed as
  // | you go; when the step returns no send or receive is still in flight (Note
  // | [Deadlock-free ordering], handout Task C).
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    post_receives(schedule, k);
    const Action& a = schedule[k];
    if (a.pass == Pass::kForward) {
      forward(a.micro_batch, x, targets);
    } else {
      backward(a.micro_batch);
    }
    test_sends();
  }
  wait_sends();
  // END SOLUTION
  return stage_ == stages_ - 1 ? step_loss_ : 0.0;
}

}  // namespace dtl::lab07
