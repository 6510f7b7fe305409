// Lab 04 on a GPU, played on the host: the order of the reducer's issues and waits
// against the compute stream, checked where there is no GPU (CI).
//
// On a GPU (handout, "On a GPU: streams and events") backward's kernels, the
// bucket allreduces and the optimizer step are queued on two streams, and only
// events order them: a bucket's allreduce reads its gradients after the event
// recorded when it was issued, and the optimizer step sees the sums only after
// finish() saw the allreduce complete. A CPU backend runs everything at once and
// in order, so it cannot show a bucket issued before its last gradient or a step
// that does not wait. dtl::testing::StreamModelCommunicator keeps the compute
// stream's order as a list: the gradients backward writes (logged from the
// grad_ready hook, where on a GPU the kernels that wrote the gradient are already
// queued), zero_grad, the optimizer step's read, and each issue and completion.
// The tests check on it, with your Reducer and a real backend (Open MPI, the
// results against the single-process oracle too):
//   - no kernel touches a bucket between its issue and its completion (a gradient
//     written into a bucket in flight, or a step reading it before finish());
//   - each bucket leaves after the last write of each of its gradients in the step;
//   - overlapped: right after its last gradient (nothing of backward in between);
//     naive and bucketed: after all of backward; inside no_sync(): never.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "harness/testing/stream_model_communicator.h"
#include "labs/04_bucketed_ddp/tests/ddp_test_util.h"

namespace lab04_test {
namespace {

using dtl::testing::StreamModelCommunicator;
using Kind = StreamModelCommunicator::Kind;
using lab04::ReducerMode;

bool overlaps(const StreamModelCommunicator::Entry& a, const StreamModelCommunicator::Entry& b) {
  return a.bytes > 0 && b.bytes > 0 && a.begin < b.begin + b.bytes && b.begin < a.begin + a.bytes;
}

// The DDP steps of ddp() (ddp_test_util.h), with the compute stream's accesses
// logged on `backend`. Returns the final parameters.
std::vector<float> logged_ddp(StreamModelCommunicator& backend, const DdpRun& run, std::uint64_t seed) {
  const int rank = backend.rank(), size = backend.world_size();
  nn::Model model = make_model(run.model, seed + static_cast<std::uint64_t>(rank) * 1000);
  model.flatten_values();
  lab04::broadcast_parameters(backend, model, 0);
  lab04::Reducer reducer(backend, model, with_buckets(model, run.reducer));
  // Around the reducer's hook: on a GPU the kernels that wrote p.grad are queued
  // before grad_ready fires, so the write goes first.
  auto reducer_hook = model.hooks().grad_ready;
  model.hooks().grad_ready = [&](nn::Parameter& p) {
    backend.compute_writes(p.grad.raw(), static_cast<std::size_t>(p.grad.bytes()), "backward writes " + p.name + ".grad");
    reducer_hook(p);
  };
  Optimizer optimizer(run.opt, model.parameter_count());
  const nn::Tensor& grads = model.flat_grads();
  const auto grad_bytes = static_cast<std::size_t>(grads.bytes());
  const std::int64_t b = kGlobalBatch / size;
  backend.clear();  // the broadcast and the model check are not part of a step
  for (int step = 0; step < kSteps; ++step) {
    backend.compute_writes(grads.raw(), grad_bytes, "zero_grad, step " + std::to_string(step));
    model.zero_grad();
    for (int m = 0; m < run.micro_steps; ++m) {
      const int data_step = step * run.micro_steps + m;
      if (m + 1 < run.micro_steps) {
        auto scope = reducer.no_sync();
        forward_backward(model, run.model, data_step, rank * b, (rank + 1) * b);
      } else {
        forward_backward(model, run.model, data_step, rank * b, (rank + 1) * b);
      }
    }
    reducer.finish();
    backend.compute_reads(grads.raw(), grad_bytes, "optimizer step " + std::to_string(step) + " reads the gradients");
    optimizer.step(model);
  }
  model.hooks().grad_ready = reducer_hook;
  const auto p = model.flat_values().span<float>();
  return {p.begin(), p.end()};
}

// The bucket rules on the log (the races are StreamModelCommunicator::check()'s).
// Returns "" or what is wrong, with the entries around it.
std::string check_bucket_order(const StreamModelCommunicator& backend, ReducerMode mode, int micro_steps,
                               std::size_t buckets) {
  const auto& log = backend.entries();
  // Steps: from one zero_grad to the next.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i].kind == Kind::kWrite && log[i].what.rfind("zero_grad", 0) == 0) starts.push_back(i);
  }
  if (starts.size() != static_cast<std::size_t>(kSteps)) return "expected " + std::to_string(kSteps) + " steps in the log";
  starts.push_back(log.size());
  for (std::size_t s = 0; s + 1 < starts.size(); ++s) {
    const std::size_t begin = starts[s], end = starts[s + 1];
    std::size_t readies = 0, last_write = begin;
    // Backward of the last micro-step: the writes after the last no_sync micro-step's.
    std::size_t writes = 0;
    for (std::size_t i = begin + 1; i < end; ++i) writes += log[i].kind == Kind::kWrite ? 1 : 0;
    const std::size_t per_micro = writes / static_cast<std::size_t>(micro_steps);
    std::size_t seen_writes = 0, synced_from = end;
    for (std::size_t i = begin + 1; i < end; ++i) {
      if (log[i].kind != Kind::kWrite) continue;
      if (++seen_writes == per_micro * static_cast<std::size_t>(micro_steps - 1) + 1) synced_from = i;
      last_write = i;
    }
    for (std::size_t i = begin + 1; i < end; ++i) {
      const auto& e = log[i];
      if (e.kind != Kind::kReady) continue;
      ++readies;
      if (i < synced_from) {
        return "step " + std::to_string(s) + ": " + e.what + " was issued during a micro-step inside no_sync()\n" +
               backend.around(i);
      }
      // After the last write of each of its gradients in this step.
      for (std::size_t j = i + 1; j < end; ++j) {
        if (log[j].kind == Kind::kWrite && overlaps(log[j], e)) {
          return "step " + std::to_string(s) + ": " + e.what + " was issued before its last gradient ('" +
                 log[j].what + "', entry " + std::to_string(j) + ")\n" + backend.around(i);
        }
      }
      if (mode == ReducerMode::kOverlapped) {
        // Right after its last gradient: the entries between that write and the issue
        // are issues of the buckets before it, nothing of backward.
        std::size_t k = i;
        while (k > begin && log[k - 1].kind != Kind::kWrite) --k;
        if (k == begin || !overlaps(log[k - 1], e)) {
          return "step " + std::to_string(s) + ": overlapped, but " + e.what +
                 " was not issued as soon as its last gradient was written (another gradient came in between)\n" +
                 backend.around(i);
        }
      } else if (i < last_write) {
        return "step " + std::to_string(s) + ": " + std::string(lab04::reducer_mode_name(mode)) + " mode, but " +
               e.what + " was issued before backward ended\n" + backend.around(i);
      }
    }
    if (readies != buckets) {
      return "step " + std::to_string(s) + ": " + std::to_string(readies) + " allreduces issued, expected one per bucket (" +
             std::to_string(buckets) + ")";
    }
  }
  return "";
}

struct OrderCase {
  ReducerMode mode;
  int micro_steps;
};

class StreamOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(StreamOrder, BucketsLeaveAfterTheirLastGradientAndLandBeforeTheStep) {
  const OrderCase c = GetParam();
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  StreamModelCommunicator backend(inner);
  for (ModelKind model : {ModelKind::kMlp, ModelKind::kGpt}) {
    DdpRun run{.model = model, .opt = OptKind::kSgd, .micro_steps = c.micro_steps};
    run.reducer.mode = c.mode;
    const std::string what = std::string(model_name(model)) + ", " + lab04::reducer_mode_name(c.mode) + ", " +
                             std::to_string(c.micro_steps) + " micro-step(s)";
    const std::vector<float> got = logged_ddp(backend, run, 42);
    EXPECT_TRUE(close_to_oracle(single_process(model, OptKind::kSgd, 42, c.micro_steps), got, what,
                                initial_parameters(model, 42)));
    EXPECT_EQ(backend.check(), "") << what;
    nn::Model probe = make_model(model, 42);
    dtl::MpiCommunicator counter(comm(), dtl::MpiMode::kThread);
    lab04::Reducer reducer(counter, probe, with_buckets(probe, run.reducer));
    EXPECT_EQ(check_bucket_order(backend, c.mode, c.micro_steps, reducer.buckets().size()), "") << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamOrder,
                         ::testing::Values(OrderCase{ReducerMode::kOverlapped, 1}, OrderCase{ReducerMode::kOverlapped, 3},
                                           OrderCase{ReducerMode::kBucketed, 1}, OrderCase{ReducerMode::kNaive, 2}),
                         [](const ::testing::TestParamInfo<OrderCase>& param) {
                           return std::string(lab04::reducer_mode_name(param.param.mode)) + "_" +
                                  std::to_string(param.param.micro_steps) + "micro";
                         });

// The checks catch what they are written for: each mistake played by hand.
TEST(StreamModel, CatchesTheMistakesItIsWrittenFor) {
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  StreamModelCommunicator backend(inner);
  std::vector<float> bucket(8, 1.0f);
  const std::size_t bytes = bucket.size() * sizeof(float);
  // A gradient written after its bucket left (an event recorded too early).
  backend.compute_writes(bucket.data(), bytes, "backward writes w.grad");
  dtl::Work early = backend.allreduce(std::span<float>(bucket), dtl::ReduceOp::kAvg);
  backend.compute_writes(bucket.data() + 4, bytes / 2, "backward writes b.grad");
  early.wait();
  EXPECT_NE(backend.check().find("'backward writes b.grad' (compute stream entry 2) writes the buffer of allreduce"),
            std::string::npos)
      << backend.check();
  // An optimizer step queued before the allreduce was waited for.
  backend.clear();
  dtl::Work unwaited = backend.allreduce(std::span<float>(bucket), dtl::ReduceOp::kAvg);
  backend.compute_reads(bucket.data(), bytes, "optimizer step");
  unwaited.wait();
  EXPECT_NE(backend.check().find("'optimizer step' (compute stream entry 1) reads the buffer"), std::string::npos)
      << backend.check();
  // An allreduce never waited for.
  backend.clear();
  dtl::Work pending = backend.allreduce(std::span<float>(bucket), dtl::ReduceOp::kAvg);
  EXPECT_NE(backend.check().find("was never waited for"), std::string::npos) << backend.check();
  pending.wait();
  EXPECT_EQ(backend.check(), "");
  // The right order passes.
  backend.clear();
  backend.compute_writes(bucket.data(), bytes, "backward writes w.grad");
  dtl::Work right = backend.allreduce(std::span<float>(bucket), dtl::ReduceOp::kAvg);
  right.wait();
  backend.compute_reads(bucket.data(), bytes, "optimizer step");
  EXPECT_EQ(backend.check(), "");
}

}  // namespace
}  // namespace lab04_test
