// The bubble of a pipeline stage on a GPU, measured from CUDA events (lab 07's GPU
// tests and its Gpu/* benchmark rows). A host clock around a forward measures its
// launches; events recorded on the compute stream are stamped when the GPU reaches
// them. Attached to a stage's model hooks, the timer records one event pair per
// action (F: before the first unit's forward, after the last unit's; B: before the
// last unit's backward, after the first unit's) and one pair around the step, so
//
//     busy = sum over actions of (end - begin),   bubble = 1 - busy / step,
//
// the idle share of this stage's step on its compute stream: the waits for
// activations and gradients, which Work::wait() turns into stream waits on the
// receives' `done` events (Note [A stage on a GPU] in lab07/pipeline.h). Without
// checkpointing only: a recomputed forward inside B would fire the forward hooks.
#pragma once

#if DTL_HAVE_NCCL

#include <cuda_runtime_api.h>

#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/stream.h"
#include "harness/nn/model.h"

namespace lab07_gpu {

class GpuActionTimer {
 public:
  /// Attaches to `model`'s hooks (replacing them) and records on `stream`; at most
  /// `actions` actions a step.
  GpuActionTimer(dtl::nn::Model& model, cudaStream_t stream, int actions) : stream_(stream) {
    begins_.resize(static_cast<std::size_t>(actions));
    ends_.resize(static_cast<std::size_t>(actions));
    const int last = model.unit_count() - 1;
    dtl::nn::ModelHooks& hooks = model.hooks();
    hooks.pre_forward = [this](int unit) {
      if (unit == 0) begin_action();
    };
    hooks.post_forward = [this, last](int unit) {
      if (unit == last) end_action();
    };
    hooks.pre_backward = [this, last](int unit) {
      if (unit == last) begin_action();
    };
    hooks.post_backward = [this](int unit) {
      if (unit == 0) end_action();
    };
  }

  /// Before train_step().
  void begin_step() {
    count_ = 0;
    step_begin_.record(stream_);
  }
  /// After train_step(): waits for the stream and returns this stage's bubble.
  double end_step() {
    step_end_.record(stream_);
    DTL_CUDA_CHECK(cudaEventSynchronize(step_end_.get()));
    busy_ = 0.0;
    for (int k = 0; k < count_; ++k) {
      busy_ += dtl::cuda::elapsed_seconds(begins_[static_cast<std::size_t>(k)], ends_[static_cast<std::size_t>(k)]);
    }
    step_ = dtl::cuda::elapsed_seconds(step_begin_, step_end_);
    return step_ > 0 ? 1.0 - busy_ / step_ : 0.0;
  }
  /// The last step's GPU time and its busy part, in seconds.
  double step_seconds() const { return step_; }
  double busy_seconds() const { return busy_; }
  /// The actions timed in the last step.
  int actions() const { return count_; }

 private:
  void begin_action() {
    if (count_ < static_cast<int>(begins_.size())) begins_[static_cast<std::size_t>(count_)].record(stream_);
  }
  void end_action() {
    if (count_ < static_cast<int>(ends_.size())) ends_[static_cast<std::size_t>(count_++)].record(stream_);
  }

  cudaStream_t stream_;
  std::vector<dtl::cuda::Event> begins_, ends_;
  dtl::cuda::Event step_begin_, step_end_;
  int count_ = 0;
  double busy_ = 0.0, step_ = 0.0;
};

}  // namespace lab07_gpu

#endif  // DTL_HAVE_NCCL
