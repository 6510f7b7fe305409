// Lab 07, given (not a task; compiled into both builds): a PipelineStage's set-up
// and tear-down around your executor (src/stage.cc): the constructor's checks and
// the stage's link (its own MpiPeerLink, or PipelineOptions::link), the destructor
// that leaves behind what an exception left in flight, and the check that a schedule is one F and one B per
// micro-batch, each B after its F.
#include <mpi.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

PipelineStage::PipelineStage(MPI_Comm pipeline, nn::Model model, const nn::Stage& stage, PipelineOptions options)
    : model_(std::move(model)), stage_info_(stage), options_(std::move(options)) {
  // Every check comes before the collective Comm duplicate below, and depends only
  // on arguments every rank has, so a bad argument throws on every rank and no
  // rank is left waiting in the duplicate.
  const auto [rank, size] = rank_and_size(pipeline);
  DTL_REQUIRE_ARG(model_.unit_count() == stage.end - stage.begin && model_.unit_count() >= 1, "PipelineStage",
                  "model", "holds " + std::to_string(model_.unit_count()) + " units; stage [" +
                               std::to_string(stage.begin) + ", " + std::to_string(stage.end) + ") needs " +
                               std::to_string(stage.end - stage.begin) + " (at least 1)");
  DTL_REQUIRE_ARG(model_.dtype() == nn::DType::kF32, "PipelineStage", "model", "must compute in f32");
  DTL_REQUIRE_ARG(!stage.input_shape.empty() && !stage.output_shape.empty() &&
                      stage.input_shape[0] == stage.output_shape[0] && stage.input_shape[0] >= 1,
                  "PipelineStage", "stage",
                  "must have input and output shapes whose first dimension is the same batch B >= 1, not " +
                      nn::to_string(stage.input_shape) + " and " + nn::to_string(stage.output_shape));
  batch_ = stage.input_shape[0];
  const int m = options_.micro_batches;
  DTL_REQUIRE_ARG(m >= 1 && m <= batch_ && m <= kMaxMicroBatches, "PipelineStage", "micro_batches",
                  "is " + std::to_string(m) + "; it must be in [1, " +
                      std::to_string(std::min<std::int64_t>(batch_, kMaxMicroBatches)) + "] (at least one row each)");
  if (options_.link != nullptr) {
    DTL_REQUIRE_ARG(options_.link->size() == size && options_.link->rank() == rank, "PipelineStage", "options.link",
                    "is rank " + std::to_string(options_.link->rank()) + " of " + std::to_string(options_.link->size()) +
                        "; it must span the pipeline's ranks, this one being rank " + std::to_string(rank) + " of " +
                        std::to_string(size));
    link_ = options_.link;
  } else {
    // Our own duplicate of `pipeline` (collective): no message of the caller's can match ours.
    own_link_ = std::make_unique<MpiPeerLink>(pipeline);
    link_ = own_link_.get();
  }
  const std::vector<nn::Parameter*> params = model_.parameters();
  if (!params.empty()) device_ = params.front()->value.device();
  stage_ = rank;
  stages_ = size;
}

PipelineStage::~PipelineStage() {
  // Only after an exception can operations still be pending here. Destroying
  // their Works would wait for them, maybe forever (a receive whose send never
  // comes), and a message cannot be taken back: each is left behind, Work and
  // buffer deliberately leaked, since the link may still write or read the buffer.
  for (std::vector<Pending>* list : {&activation_recv_, &gradient_recv_, &sends_}) {
    for (Pending& p : *list) {
      if (!p.work.completed()) new Pending(std::move(p));  // NOLINT: leaked on purpose, see above
    }
  }
}

void PipelineStage::check_schedule(std::span<const Action> schedule) const {
  const int m = options_.micro_batches;
  auto bad = [&](std::size_t k, const std::string& why) {
    throw_invalid_argument("PipelineStage::train_step", "schedule",
                           "action " + std::to_string(k) + " (" + schedule_string(schedule.subspan(k, 1)) + ") " +
                               why + "; the schedule is: " + schedule_string(schedule));
  };
  std::vector<char> forward_done(static_cast<std::size_t>(m), 0), backward_done(static_cast<std::size_t>(m), 0);
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const Action& a = schedule[k];
    if (a.pass != Pass::kForward && a.pass != Pass::kBackward) bad(k, "is neither F nor B");
    if (a.chunk != 0) bad(k, "names a chunk other than 0 (an interleaved schedule runs on InterleavedStage)");
    if (a.micro_batch < 0 || a.micro_batch >= m) {
      bad(k, "names a micro-batch outside [0, " + std::to_string(m) + ")");
    }
    const auto i = static_cast<std::size_t>(a.micro_batch);
    if (a.pass == Pass::kForward) {
      if (forward_done[i]) bad(k, "repeats a forward");
      forward_done[i] = 1;
    } else {
      if (!forward_done[i]) bad(k, "comes before the forward of its micro-batch");
      if (backward_done[i]) bad(k, "repeats a backward");
      backward_done[i] = 1;
    }
  }
  DTL_REQUIRE_ARG(schedule.size() == 2 * static_cast<std::size_t>(m), "PipelineStage::train_step", "schedule",
                  "has " + std::to_string(schedule.size()) + " actions; m = " + std::to_string(m) +
                      " micro-batches need one F and one B each: " + schedule_string(schedule));
}

}  // namespace dtl::lab07
