// Lab 06 on a GPU, played on the host: the order of the trainer's gathers,
// reduce-scatters and waits against the compute stream, checked where there is no
// GPU (CI). See labs/04_bucketed_ddp/tests/stream_order_test.cc for the picture:
// on a GPU a collective reads its input after the kernels queued before its issue,
// runs beside the ones queued after, and only a completed wait orders later kernels
// after it. dtl::testing::StreamModelCommunicator keeps that order as a list. The
// trainer's observer (ShardedOptions::observer, called after each hook's own work)
// logs what the unit's kernels are about to touch:
//   - pre_forward(u): forward reads u's full values (FSDP: just gathered);
//   - pre_backward(u): backward reads u's full values and writes u's full gradient;
//   - step: the optimizer has read every gradient shard and written every shard.
// check() then fails on a unit computed while its gather is in flight, a gradient
// written while its reduce-scatter is in flight (issued before backward), an
// optimizer step before a reduce-scatter completed, or an operation never waited for.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/testing/stream_model_communicator.h"
#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using dtl::testing::StreamModelCommunicator;
using lab06::ShardingMode;

struct OrderCase {
  ShardingMode mode;
  int prefetch;
};

class StreamOrder : public ::testing::TestWithParam<OrderCase> {};

void log_unit(StreamModelCommunicator& log, const lab06::UnitState& st, bool read_values, bool write_grads,
              const std::string& phase) {
  if (read_values && st.full_values.raw() != nullptr) {
    log.compute_reads(st.full_values.raw(), static_cast<std::size_t>(st.full_values.bytes()),
                      phase + " reads " + st.name + " values");
  }
  if (write_grads && st.full_grads.raw() != nullptr) {
    log.compute_writes(st.full_grads.raw(), static_cast<std::size_t>(st.full_grads.bytes()),
                       phase + " writes " + st.name + " gradient");
  }
}

TEST_P(StreamOrder, UnitsComputeOnlyOnLandedGathersAndReduceAfterBackward) {
  const OrderCase c = GetParam();
  auto inner = mpi_backend(comm());
  StreamModelCommunicator log(*inner);
  const int rank = comm().rank(), size = comm().size();
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    const std::string what = std::string(lab06::sharding_mode_name(c.mode)) + ", prefetch " +
                             std::to_string(c.prefetch) + ", " + model_name(kind);
    nn::Model model = make_model(kind, 5 + static_cast<std::uint64_t>(rank) * 1000);
    lab06::ShardedOptions options = options_for(c.mode, OptKind::kSgd, c.prefetch, test_layouts(model, size));
    lab06::ShardedTrainer* trainer_ptr = nullptr;
    options.observer = [&](const char* phase, int u) {
      const std::string p = phase;
      if (u < 0) {
        for (int v = 0; v < trainer_ptr->unit_count(); ++v) {
          const lab06::UnitState& st = trainer_ptr->unit(v);
          log.compute_reads(st.grad_shard.raw(), static_cast<std::size_t>(st.grad_shard.bytes()),
                            "optimizer reads " + st.name + " gradient shard");
          log.compute_writes(st.shard.raw(), static_cast<std::size_t>(st.shard.bytes()),
                             "optimizer writes " + st.name + " shard");
        }
        return;
      }
      const lab06::UnitState& st = trainer_ptr->unit(u);
      if (p == "pre_forward") log_unit(log, st, true, false, "forward");
      if (p == "pre_backward") log_unit(log, st, true, true, "backward");
    };
    lab06::ShardedTrainer trainer(log, model, options);
    trainer_ptr = &trainer;
    log.clear();  // the constructor's broadcasts are not part of a step
    for (int step = 0; step < kSteps; ++step) {
      const Batch b = rank_batch(kind, step, kGlobalBatch, rank, size);
      trainer.step(b.x, b.y);
    }
    EXPECT_EQ(log.check(), "") << what;
    EXPECT_TRUE(close_to(single_process(kind, OptKind::kSgd, 5), gathered_parameters(trainer, comm()), what));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamOrder,
                         ::testing::Values(OrderCase{ShardingMode::kZero1, 0}, OrderCase{ShardingMode::kZero2, 1},
                                           OrderCase{ShardingMode::kFsdp, 0}, OrderCase{ShardingMode::kFsdp, 2}),
                         [](const ::testing::TestParamInfo<OrderCase>& param) {
                           return std::string(lab06::sharding_mode_name(param.param.mode)) + "_p" +
                                  std::to_string(param.param.prefetch);
                         });

}  // namespace
}  // namespace lab06_test
