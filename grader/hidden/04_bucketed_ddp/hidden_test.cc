// Hidden tests for lab 04 (an example set). The odd model: make_mlp(2, 7, 3, 3) has,
// in forward order, 14 7 49 7 49 7 21 3 elements (bytes 56 28 196 28 196 28 84 12),
// at offsets 0 14 21 70 77 126 133 154 of a 157-element flat buffer.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "labs/04_bucketed_ddp/tests/ddp_test_util.h"

namespace lab04_test {
namespace {

using Buckets = std::vector<std::vector<int>>;
const std::vector<std::size_t> kOddBytes = {56, 28, 196, 28, 196, 28, 84, 12};

TEST(HiddenBuckets, CapsThatSplitExactlyAtAParameterBoundary) {
  EXPECT_EQ(lab04::assign_buckets(kOddBytes, 224, 96), (Buckets{{7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  nn::Model model = make_model(ModelKind::kOddMlp, 1);
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  lab04::Reducer reducer(backend, model, {.bucket_cap_bytes = 224, .first_bucket_cap_bytes = 96,
                                          .buckets = {{7, 6}, {5, 4}, {3, 2}, {1, 0}}});
  const auto& b = reducer.buckets();
  ASSERT_EQ(b.size(), 4u);
  const std::size_t offsets[] = {133, 77, 21, 0}, counts[] = {24, 56, 56, 21};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b[i].offset, offsets[i]) << "bucket " << i;
    EXPECT_EQ(b[i].count, counts[i]) << "bucket " << i;
  }
}

// Zero-byte parameters beside a bucket that reached its cap exactly (ddp.h): the full
// bucket is closed at once, so the zero-byte one opens the next bucket and the
// following parameters join it. Code that closes a bucket only when the next
// parameter does not fit puts it into the full bucket instead.
TEST(HiddenBuckets, ZeroByteParametersAfterABucketAtItsCap) {
  EXPECT_EQ(lab04::assign_buckets(std::vector<std::size_t>{16, 0, 16}, 16, 16), (Buckets{{2}, {1, 0}}));
  EXPECT_EQ(lab04::assign_buckets(std::vector<std::size_t>{0, 16, 16}, 32, 32), (Buckets{{2, 1}, {0}}));
  EXPECT_EQ(lab04::assign_buckets(std::vector<std::size_t>{28, 0, 0, 56}, 28, 56), (Buckets{{3}, {2, 1, 0}}));
}

TEST(HiddenBuckets, ParametersLargerThanTheCapAreAlone) {
  EXPECT_EQ(lab04::assign_buckets(kOddBytes, 100, 50), (Buckets{{7}, {6}, {5}, {4}, {3}, {2}, {1, 0}}));
  EXPECT_EQ(lab04::assign_buckets(kOddBytes, 1, 1000), (Buckets{{7, 6, 5, 4, 3, 2, 1, 0}}));
}

TEST(HiddenDdp, OddModelEveryModeMatchesSingleProcess) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  for (OptKind opt : {OptKind::kSgd, OptKind::kAdamW}) {
    const std::vector<float> expected = single_process(ModelKind::kOddMlp, opt, 5);
    for (lab04::ReducerMode mode :
         {lab04::ReducerMode::kNaive, lab04::ReducerMode::kBucketed, lab04::ReducerMode::kOverlapped}) {
      DdpRun run{.model = ModelKind::kOddMlp, .opt = opt};
      run.reducer = {.mode = mode, .bucket_cap_bytes = 100, .first_bucket_cap_bytes = 50};
      EXPECT_TRUE(close_to_oracle(expected, ddp(backend, run, 5),
                                  std::string("odd mlp, ") + opt_name(opt) + ", " + lab04::reducer_mode_name(mode),
                                  initial_parameters(ModelKind::kOddMlp, 5)));
    }
  }
}

// Buckets that fill out of bucket order (Note [Issue in bucket order]): the hooks
// announce the odd model's parameters in an order of the test's choosing; the
// overlapped reducer may issue bucket b only once buckets 0..b are complete, so after
// each group of announcements exactly as many allreduces have left as the complete
// prefix of buckets, in bucket order (recorded: each one's offset in the flat buffer).
TEST(HiddenDdp, BucketsLeaveInBucketOrderWhateverOrderTheyFill) {
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  const std::vector<std::size_t> offsets = {133, 77, 21, 0};  // buckets {7, 6}, {5, 4}, {3, 2}, {1, 0}
  struct Case {
    std::vector<std::vector<int>> groups;  // parameter indices announced together
    std::vector<int> issued;               // allreduces issued after each group
  };
  const std::vector<Case> cases = {
      {{{0, 1, 2, 3, 4, 5}, {6, 7}}, {0, 4}},             // forward order: the last bucket fills first
      {{{7, 6}, {0, 1}, {5, 4}, {3, 2}}, {1, 1, 2, 4}},   // bucket 3 waits for buckets 1 and 2
      {{{6, 2, 0}, {7}, {4, 3, 1}, {5}}, {0, 1, 1, 4}}};  // half-filled buckets everywhere
  for (std::size_t c = 0; c < cases.size(); ++c) {
    RecordingCommunicator backend(inner);
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab04::Reducer reducer(backend, model,
                           {.mode = lab04::ReducerMode::kOverlapped, .buckets = {{7, 6}, {5, 4}, {3, 2}, {1, 0}}});
    model.zero_grad();
    const auto params = model.parameters();
    for (auto* p : params) {
      for (float& g : p->grad.span<float>()) g = static_cast<float>(comm().rank() + 1);
    }
    for (std::size_t g = 0; g < cases[c].groups.size(); ++g) {
      for (int i : cases[c].groups[g]) model.hooks().grad_ready(*params[static_cast<std::size_t>(i)]);
      EXPECT_EQ(backend.count(dtl::CollectiveKind::kAllreduce), cases[c].issued[g])
          << "case " << c << ", after announcement group " << g << ": allreduces issued";
    }
    reducer.finish();
    const auto ops = backend.ops(dtl::CollectiveKind::kAllreduce);
    const float* flat = model.flat_grads().data<float>();
    ASSERT_EQ(ops.size(), offsets.size()) << "case " << c;
    for (std::size_t b = 0; b < ops.size(); ++b) {
      EXPECT_EQ(static_cast<const float*>(ops[b].send) - flat, static_cast<std::ptrdiff_t>(offsets[b]))
          << "case " << c << ": allreduce " << b << " is not bucket " << b << "'s";
    }
    const float want = static_cast<float>(comm().size() + 1) / 2.0f;
    for (float g : model.flat_grads().span<float>()) {
      ASSERT_EQ(g, want) << "case " << c << ": a gradient is not the average";
    }
  }
}

// finish() returns only once every allreduce the reducer issued has completed (the
// recording backend saw its end: waited for, or dropped, since a Work's destructor
// waits). A reducer that keeps a bucket's Work past the step, to wait for it later,
// leaves the optimizer reading a bucket still in flight.
TEST(HiddenDdp, FinishWaitsForEveryBucketItIssued) {
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  for (lab04::ReducerMode mode :
       {lab04::ReducerMode::kNaive, lab04::ReducerMode::kBucketed, lab04::ReducerMode::kOverlapped}) {
    RecordingCommunicator backend(inner);
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab04::Reducer reducer(backend, model, {.mode = mode, .bucket_cap_bytes = 100, .first_bucket_cap_bytes = 50});
    model.zero_grad();
    const auto params = model.parameters();
    for (auto* p : params) {
      for (float& g : p->grad.span<float>()) g = static_cast<float>(comm().rank() + 1);
    }
    for (std::size_t i = params.size(); i-- > 0;) model.hooks().grad_ready(*params[i]);
    reducer.finish();
    const auto ops = backend.ops(dtl::CollectiveKind::kAllreduce);
    EXPECT_EQ(ops.size(), reducer.buckets().size()) << lab04::reducer_mode_name(mode) << ": one allreduce per bucket";
    for (std::size_t b = 0; b < ops.size(); ++b) {
      EXPECT_NE(ops[b].end, 0.0) << lab04::reducer_mode_name(mode) << ": finish() returned, but allreduce " << b
                                 << " of " << ops.size() << " was never waited for";
    }
  }
}

TEST(HiddenDdp, EmulatedLinkWithMicroSteps) {
  auto backend = lab04::make_communicator("emulated:alpha=50us,bw=1GB/s", comm());
  const std::vector<float> expected = single_process(ModelKind::kGpt, OptKind::kAdamW, 8, 2);
  DdpRun run{.model = ModelKind::kGpt, .opt = OptKind::kAdamW, .micro_steps = 2};
  EXPECT_TRUE(close_to_oracle(expected, ddp(*backend, run, 8), "gpt, 2 micro-steps, emulated",
                              initial_parameters(ModelKind::kGpt, 8)));
}

}  // namespace
}  // namespace lab04_test
