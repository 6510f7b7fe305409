// Lab 07 on a GPU, played on the host (Note [A stage on a GPU] in lab07/pipeline.h).
// Your executor runs over a dtl::testing::StreamModelPeerLink: its messages go
// over Open MPI (the results are real) and are recorded, with what the stage's
// kernels read, in one list in program order, the model of the compute stream.
// The test logs, from the model's hooks, the read of each received buffer:
//   - F(i) on stage s > 0 reads the activation received from s - 1 (tag 2i);
//   - B(i) on stage s < P - 1 reads the gradient received from s + 1 (tag 2i + 1).
// check() then fails on a received buffer read before its receive was waited for
// (on a GPU the data may not have landed), a sent buffer written while in flight,
// or a message never waited for; order_mismatch() on two stages that issue their
// messages to each other in different orders (tags forgive it, NCCL does not).
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "harness/testing/stream_model_peer_link.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {
namespace {

using dtl::testing::StreamModelCommunicator;
using dtl::testing::StreamModelPeerLink;

// One recorded step of `schedule` on this rank's stage; returns check()'s and order_mismatch()'s verdicts.
struct Recorded {
  std::string races, order;
};

Recorded record_steps(ModelKind kind, const std::vector<Action>& schedule, int m, bool checkpoint, int steps) {
  const int P = comm().size(), s = comm().rank();
  dtl::MpiCommunicator unused(comm(), dtl::MpiMode::kNonblocking);  // the log's inner backend (no collectives here)
  StreamModelCommunicator log(unused);
  dtl::MpiPeerLink mpi(comm());
  StreamModelPeerLink link(mpi, log);
  nn::Model whole = make_model(kind, 3);
  const std::int64_t global = 14;
  const nn::Stage stage = stage_of(whole, even_cut(5, P), s, input_shape(kind, global));
  lab07::PipelineOptions options;
  options.micro_batches = m;
  options.checkpoint = checkpoint;
  options.link = &link;
  lab07::PipelineStage pipe(comm(), std::move(whole).slice(stage.begin, stage.end), stage, options);
  const int units = pipe.model().unit_count();
  std::size_t k = 0;  // the action running now
  auto reads_received = [&](int peer, int tag, const char* what) {
    std::size_t bytes = 0;
    const void* buf = link.recv_buffer(peer, tag, &bytes);
    ASSERT_NE(buf, nullptr) << what << ": stage " << s << " never posted the receive of tag " << tag << " from "
                            << peer;
    log.compute_reads(buf, bytes, what);
  };
  nn::ModelHooks& hooks = pipe.model().hooks();
  hooks.pre_forward = [&](int unit) {
    if (unit != 0 || k >= schedule.size() || schedule[k].pass != Pass::kForward || s == 0) return;
    const int i = schedule[k].micro_batch;
    reads_received(s - 1, lab07::activation_tag(i), ("F" + std::to_string(i) + " reads its activation").c_str());
  };
  hooks.post_forward = [&](int unit) {
    if (unit == units - 1 && k < schedule.size() && schedule[k].pass == Pass::kForward) ++k;
  };
  hooks.pre_backward = [&](int unit) {
    if (unit != units - 1 || k >= schedule.size() || s == P - 1) return;
    const int i = schedule[k].micro_batch;
    reads_received(s + 1, lab07::gradient_tag(i), ("B" + std::to_string(i) + " reads its gradient").c_str());
  };
  hooks.post_backward = [&](int unit) {
    if (unit == 0) ++k;
  };
  Recorded out;
  for (int step = 0; step < steps; ++step) {
    log.clear();
    link.clear();
    k = 0;
    const Batch b = make_batch(kind, step, global, 0, global);
    pipe.train_step(b.x, b.y, schedule);
    if (out.races.empty()) out.races = log.check();
    if (out.order.empty()) out.order = link.order_mismatch(comm());
  }
  return out;
}

TEST(StreamOrder, ReceivedBuffersAreReadOnlyAfterTheirWaitAndOrdersMatchForNccl) {
  const int P = comm().size(), s = comm().rank();
  for (Order order : {Order::kGPipe, Order::kOneFOneB}) {
    for (int m : {1, 4, 7}) {
      for (bool checkpoint : {false, true}) {
        const std::string what = std::string(order_name(order)) + ", m = " + std::to_string(m) +
                                 (checkpoint ? ", checkpointing" : "") + ", stage " + std::to_string(s);
        const Recorded r = record_steps(ModelKind::kMlp, order_of(order, P, s, m), m, checkpoint, 2);
        EXPECT_EQ(r.races, "") << what;
        EXPECT_EQ(r.order, "") << what;
      }
    }
  }
  const Recorded gpt = record_steps(ModelKind::kGpt, order_of(Order::kOneFOneB, P, s, 4), 4, false, 1);
  EXPECT_EQ(gpt.races, "") << "GPT, 1F1B, m = 4, stage " << s;
  EXPECT_EQ(gpt.order, "") << "GPT, 1F1B, m = 4, stage " << s;
}

// The stand-in must see what NCCL would get wrong: stage 0 runs its forwards in
// the order F1 F0 (right over MPI, whose tags match them), every other stage F0 F1.
TEST(StreamOrder, ForwardsReorderedOnOneStageAreAnOrderMismatch) {
  const int P = comm().size(), s = comm().rank();
  if (P < 2) GTEST_SKIP() << "needs two stages";
  const std::vector<Action> schedule = s == 0 ? parse("F1 F0 B0 B1") : gpipe_order(P, s, 2);
  const Recorded r = record_steps(ModelKind::kMlp, schedule, 2, false, 1);
  EXPECT_EQ(r.races, "") << "stage " << s;
  if (s == 1) {
    EXPECT_NE(r.order.find("rank 0 sent tags [2 0] to rank 1"), std::string::npos) << r.order;
  } else {
    EXPECT_EQ(r.order, "") << "stage " << s;
  }
}

}  // namespace
}  // namespace lab07_test
