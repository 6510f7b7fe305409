// Lab 04: the parameter broadcast and model check (task A), the reducer (task C)
// against a single-process run, no_sync, overlap, and the errors.
//
// Oracle: the same k steps run in one process on the whole batch, inside every
// rank (ddp_test_util.h, with the tolerance and why). Backends: Open MPI with a
// communication thread and nonblocking, the alpha-beta emulator, and your lab-03
// ring (the Ring/ tests: they need lab 03 done).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/random.h"
#include "labs/04_bucketed_ddp/tests/ddp_test_util.h"

namespace lab04_test {
namespace {

using lab04::ReducerMode;

// A unit whose parameter is in the model but never gets a gradient (a frozen or
// unused parameter): forward and backward pass through, grad_ready is never called.
class Unused final : public nn::Layer {
 public:
  Unused() : nn::Layer("unused") {
    p_.name = "unused.weight";
    p_.value = nn::Tensor::zeros({5}, nn::DType::kF32, nn::MemoryCategory::kParameters);
    p_.grad = nn::Tensor::zeros({5}, nn::DType::kF32, nn::MemoryCategory::kGradients);
  }
  std::string kind() const override { return "Unused"; }
  const nn::Tensor& forward(const nn::Tensor& x) override { return x; }
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn&) override { return dy; }
  std::vector<nn::Parameter*> parameters() override { return {&p_}; }
  nn::Shape output_shape(const nn::Shape& input) const override { return input; }
  void release_slot(int) override {}

 private:
  nn::Parameter p_;
};

std::vector<float> values_of(const nn::Model& model) {
  std::vector<float> out;
  for (const auto* p : model.parameters()) {
    const auto s = p->value.span<float>();
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

// ---------------------------------------------------------------------------
// Task A: the same model everywhere
// ---------------------------------------------------------------------------

TEST(BroadcastParameters, EveryRankGetsRankZerosParameters) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  for (bool flat : {false, true}) {
    nn::Model model = make_model(ModelKind::kGpt, 100 + static_cast<std::uint64_t>(comm().rank()));
    if (flat) model.flatten_values();
    lab04::broadcast_parameters(backend, model, 0);
    EXPECT_TRUE(dtl::testing::buffers_equal(values_of(make_model(ModelKind::kGpt, 100)), values_of(model),
                                            flat ? "flat parameters" : "parameters"));
  }
}

TEST(BroadcastParameters, FromAnotherRoot) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  const int root = comm().size() - 1;
  nn::Model model = make_model(ModelKind::kMlp, 200 + static_cast<std::uint64_t>(comm().rank()));
  lab04::broadcast_parameters(backend, model, root);
  EXPECT_TRUE(dtl::testing::buffers_equal(values_of(make_model(ModelKind::kMlp, 200 + root)), values_of(model),
                                          "parameters"));
  EXPECT_THROW(lab04::broadcast_parameters(backend, model, comm().size()), dtl::InvalidArgument);
}

TEST(ModelAgreement, SameModelPasses) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  EXPECT_NO_THROW(lab04::check_model_agreement(backend, make_model(ModelKind::kGpt, 1)));
}

// The last rank builds a wider hidden layer: the error names it and fc0.weight.
TEST(ModelAgreement, NamesTheRankAndParameterThatDiffer) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  const int last = comm().size() - 1;
  const bool odd = comm().size() > 1 && comm().rank() == last;
  nn::Model model = nn::make_mlp(2, odd ? 25 : 24, 3, 2, 1);
  if (comm().size() == 1) {
    EXPECT_NO_THROW(lab04::check_model_agreement(backend, model));
    return;  // no collective follows
  }
  try {
    lab04::check_model_agreement(backend, model);
    ADD_FAILURE() << "rank " << comm().rank() << ": ranks with different models were not detected";
  } catch (const dtl::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(last)), std::string::npos) << what;
    EXPECT_NE(what.find("fc0.weight"), std::string::npos) << what;
  }
}

// The last rank has one parameter more: the error names the rank and both counts.
TEST(ModelAgreement, NamesTheRankWithAnotherParameterCount) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  const int last = comm().size() - 1;
  nn::Model model = nn::make_mlp(2, 24, 3, 2, 1);
  if (comm().rank() == last && comm().size() > 1) {
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(std::make_unique<Unused>());
    model.add_unit("unused", std::move(layers));
  }
  if (comm().size() == 1) {
    EXPECT_NO_THROW(lab04::check_model_agreement(backend, model));
    return;
  }
  try {
    lab04::check_model_agreement(backend, model);
    ADD_FAILURE() << "rank " << comm().rank() << ": ranks with different parameter counts were not detected";
  } catch (const dtl::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(last)), std::string::npos) << what;
    EXPECT_THAT(what, ::testing::ContainsRegex("\\b7\\b")) << "the error gives the disagreeing parameter counts";
    EXPECT_THAT(what, ::testing::ContainsRegex("\\b6\\b")) << "the error gives the disagreeing parameter counts";
  }
}

// ---------------------------------------------------------------------------
// Task C: W ranks with B/W each equal one process with B
// ---------------------------------------------------------------------------

using EquivalenceParam = std::tuple<ModelKind, OptKind>;

class Equivalence : public ::testing::TestWithParam<EquivalenceParam> {
 protected:
  // The backend of this instantiation (its prefix): Mpi, Nonblocking, Emulated, Ring.
  static std::unique_ptr<dtl::Communicator> backend() {
    const std::string prefix = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    if (prefix.rfind("Ring/", 0) == 0) return lab04::make_communicator("ring", comm());
    if (prefix.rfind("Nonblocking/", 0) == 0) return lab04::make_communicator("mpi-nonblocking", comm());
    // A fast emulated link, so the test is quick; the reduction is real (mpi-thread underneath).
    if (prefix.rfind("Emulated/", 0) == 0) return lab04::make_communicator("emulated:alpha=20us,bw=2GB/s", comm());
    return lab04::make_communicator("mpi-thread", comm());
  }
};

TEST_P(Equivalence, OverlappedMatchesSingleProcess) {
  const auto [model, opt] = GetParam();
  auto comm_backend = backend();
  const std::vector<float> expected = single_process(model, opt, 42);
  const std::vector<float> got = ddp(*comm_backend, {.model = model, .opt = opt}, 42);
  EXPECT_TRUE(close_to_oracle(expected, got,
                              std::string(model_name(model)) + "/" + opt_name(opt) + " on " + comm_backend->name(),
                              initial_parameters(model, 42)));
}

std::string equivalence_name(const ::testing::TestParamInfo<EquivalenceParam>& info) {
  return std::string(model_name(std::get<0>(info.param))) + "_" + opt_name(std::get<1>(info.param));
}

const auto kCases = ::testing::Combine(::testing::Values(ModelKind::kMlp, ModelKind::kGpt),
                                       ::testing::Values(OptKind::kSgd, OptKind::kAdamW));
INSTANTIATE_TEST_SUITE_P(Mpi, Equivalence, kCases, equivalence_name);
INSTANTIATE_TEST_SUITE_P(Nonblocking, Equivalence, kCases, equivalence_name);
INSTANTIATE_TEST_SUITE_P(Emulated, Equivalence, kCases, equivalence_name);
INSTANTIATE_TEST_SUITE_P(Ring, Equivalence, kCases, equivalence_name);

// Naive and bucketed (no overlap) give the same parameters too.
TEST(ReducerModes, NaiveAndBucketedMatchSingleProcess) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  for (ModelKind model : {ModelKind::kMlp, ModelKind::kGpt}) {
    const std::vector<float> expected = single_process(model, OptKind::kSgd, 42);
    for (ReducerMode mode : {ReducerMode::kNaive, ReducerMode::kBucketed}) {
      DdpRun run{.model = model, .opt = OptKind::kSgd};
      run.reducer.mode = mode;
      EXPECT_TRUE(close_to_oracle(expected, ddp(backend, run, 42),
                                  std::string(model_name(model)) + " " + lab04::reducer_mode_name(mode),
                                  initial_parameters(model, 42)));
    }
  }
}

// Bucket caps: one bucket for everything, and a cap smaller than most parameters.
TEST(ReducerModes, AnyCapMatchesSingleProcess) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  const std::vector<float> expected = single_process(ModelKind::kGpt, OptKind::kAdamW, 42);
  for (std::size_t cap : {std::size_t{64}, std::size_t{4096}, std::size_t{1} << 30}) {
    DdpRun run{.model = ModelKind::kGpt, .opt = OptKind::kAdamW};
    run.reducer.bucket_cap_bytes = cap;
    run.reducer.first_bucket_cap_bytes = cap;
    EXPECT_TRUE(close_to_oracle(expected, ddp(backend, run, 42), "gpt, cap " + std::to_string(cap),
                                initial_parameters(ModelKind::kGpt, 42)));
  }
}

// One allreduce per bucket (per parameter when naive), every element once, averaged.
TEST(ReducerModes, IssuesOneAllreducePerBucket) {
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  for (ReducerMode mode : {ReducerMode::kNaive, ReducerMode::kBucketed, ReducerMode::kOverlapped}) {
    RecordingCommunicator backend(inner);
    nn::Model model = make_model(ModelKind::kMlp, 3);
    lab04::Reducer reducer(backend, model,
                           with_buckets(model, {.mode = mode, .bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 256}));
    model.zero_grad();
    // Each rank's gradient is rank + 1 everywhere: the average is (P + 1) / 2.
    const auto params = model.parameters();
    for (auto* p : params) {
      for (float& g : p->grad.span<float>()) g = static_cast<float>(comm().rank() + 1);
    }
    // What backward would do: announce every parameter, last first.
    for (auto it = params.rbegin(); it != params.rend(); ++it) model.hooks().grad_ready(**it);
    reducer.finish();
    EXPECT_EQ(backend.count(dtl::CollectiveKind::kAllreduce), static_cast<int>(reducer.buckets().size()))
        << lab04::reducer_mode_name(mode);
    EXPECT_EQ(reducer.last_step().allreduces, static_cast<int>(reducer.buckets().size()));
    EXPECT_EQ(backend.elements(dtl::CollectiveKind::kAllreduce), static_cast<std::size_t>(model.parameter_count()));
    const std::vector<float> want(static_cast<std::size_t>(model.parameter_count()),
                                  static_cast<float>(comm().size() + 1) / 2.0f);
    EXPECT_TRUE(dtl::testing::buffers_equal(want, std::vector<float>(model.flat_grads().span<float>().begin(),
                                                                     model.flat_grads().span<float>().end()),
                                            std::string("averaged gradients, ") + lab04::reducer_mode_name(mode)));
  }
}

// ---------------------------------------------------------------------------
// Overlap: the first bucket leaves during backward, not after it
// ---------------------------------------------------------------------------

TEST(Overlap, OverlappedIssuesDuringBackwardOthersAfter) {
  auto backend = lab04::make_communicator("emulated:10GbE", comm());
  for (ReducerMode mode : {ReducerMode::kOverlapped, ReducerMode::kBucketed}) {
    nn::Model model = make_model(ModelKind::kGpt, 9);
    lab04::Reducer reducer(*backend, model,
                           with_buckets(model, {.mode = mode, .bucket_cap_bytes = 4096, .first_bucket_cap_bytes = 1024}));
    double backward_end = 0.0;
    model.hooks().post_backward = [&](int unit) {
      if (unit == 0) backward_end = dtl::clock_seconds();
    };
    model.zero_grad();
    forward_backward(model, ModelKind::kGpt, 0, 0, kGlobalBatch / comm().size());
    reducer.finish();
    ASSERT_GT(reducer.buckets().size(), 2u);  // no collective follows in this iteration before finish()
    const auto& stats = reducer.last_step();
    if (mode == ReducerMode::kOverlapped) {
      EXPECT_LT(stats.first_issue_seconds, backward_end) << "overlapped: bucket 0 was issued after backward ended";
    } else {
      EXPECT_GE(stats.first_issue_seconds, backward_end) << "bucketed: bucket 0 was issued before backward ended";
    }
    EXPECT_EQ(stats.allreduces, static_cast<int>(reducer.buckets().size()));
  }
}

// Overlap graded from what happened, not from what the reducer reports: on a link
// far slower than compute (5 ms per allreduce, as if across a slow network), an
// overlapped reducer has a bucket's allreduce in flight while later units' backward
// runs. A reducer that issues each bucket in the gradient hook and then waits for it
// there issues "during backward" too, but never lets backward go on meanwhile:
// every unit's backward ends outside every allreduce's [issue, completion] span.
TEST(Overlap, BackwardRunsWhileABucketIsInFlight) {
  if (comm().size() == 1) GTEST_SKIP() << "one rank: an allreduce is a no-op, there is nothing to overlap";
  auto slow = lab04::make_communicator("emulated:alpha=5ms,bw=1GB/s", comm());
  RecordingCommunicator backend(*slow);
  nn::Model model = make_model(ModelKind::kGpt, 9);
  lab04::Reducer reducer(
      backend, model,
      with_buckets(model, {.mode = ReducerMode::kOverlapped, .bucket_cap_bytes = 4096, .first_bucket_cap_bytes = 1024}));
  std::vector<double> unit_ends;  // when each unit's backward ended, last unit first
  model.hooks().post_backward = [&](int) { unit_ends.push_back(dtl::clock_seconds()); };
  model.zero_grad();
  forward_backward(model, ModelKind::kGpt, 0, 0, kGlobalBatch / comm().size());
  reducer.finish();
  const auto allreduces = backend.ops(dtl::CollectiveKind::kAllreduce);
  int overlapped = 0;
  for (const auto& span : allreduces) {
    for (double t : unit_ends) overlapped += span.issue < t && t < span.end ? 1 : 0;
  }
  EXPECT_GT(allreduces.size(), 2u);
  EXPECT_GT(overlapped, 0) << "rank " << comm().rank() << ": " << allreduces.size()
                           << " allreduces on a 5 ms link, " << unit_ends.size()
                           << " units' backward, and no unit's backward ended while an allreduce was in flight\n"
                           << "---> HINT: issue a bucket and return from the gradient hook at once; wait for the "
                              "Works only in finish() (waiting inside the hook serializes backward and communication)";
}

// Overlap graded from where each bucket leaves and when it is waited for (Note
// [Watching the buckets leave] in ddp_test_util.h): each bucket's allreduce leaves
// from the gradient hook that completes it, before the later buckets' gradients are
// ready, and is not waited for (nor its test() polled until it finishes) before
// backward has made another gradient ready. Any rank count: nothing here is timed.
TEST(Overlap, EachBucketLeavesFromItsHookAndBackwardGoesOn) {
  auto slow = lab04::make_communicator("emulated:alpha=1ms,bw=1GB/s", comm());
  nn::Model model = make_model(ModelKind::kGpt, 9);
  BucketWatch watch(*slow, model);
  lab04::Reducer reducer(
      watch, model,
      with_buckets(model, {.mode = ReducerMode::kOverlapped, .bucket_cap_bytes = 4096, .first_bucket_cap_bytes = 1024}));
  watch.watch_gradients();
  model.zero_grad();
  forward_backward(model, ModelKind::kGpt, 0, 0, kGlobalBatch / comm().size());
  watch.backward_done();
  reducer.finish();
  ASSERT_GT(watch.issues.size(), 2u) << "rank " << comm().rank() << ": one allreduce per bucket";
  for (std::size_t b = 0; b < watch.issues.size(); ++b) {
    const BucketWatch::Issue& issue = watch.issues[b];
    const std::string what = "rank " + std::to_string(comm().rank()) + ", bucket " + std::to_string(b) +
                             " (flat gradient elements [" + std::to_string(issue.offset) + ", " +
                             std::to_string(issue.offset + static_cast<std::ptrdiff_t>(issue.count)) + "))";
    EXPECT_LE(issue.later_ready, 1)
        << what << ": its allreduce was issued only once " << issue.later_ready
        << " gradients of later buckets were ready: backward had gone on without it (a bucket leaves from the "
           "gradient hook that completes it, not once backward is over)";
    EXPECT_FALSE(issue.waited_early)
        << what << ": its allreduce was waited for (or its test() polled until it finished) before backward made "
           "another gradient ready: backward stood still while it was in flight (nothing overlaps); wait for the "
           "buckets in finish()";
    if (::testing::Test::HasFailure()) break;  // the first bucket that shows it is enough
  }
}

// ---------------------------------------------------------------------------
// no_sync: accumulate micro-steps locally, average once
// ---------------------------------------------------------------------------

TEST(NoSync, AccumulatesWithoutCommunicating) {
  dtl::MpiCommunicator inner(comm(), dtl::MpiMode::kThread);
  RecordingCommunicator backend(inner);
  // 3 micro-steps per step: the oracle accumulates the same 3 full batches.
  for (ModelKind model : {ModelKind::kMlp, ModelKind::kGpt}) {
    const std::vector<float> expected = single_process(model, OptKind::kSgd, 42, 3);
    backend.clear();
    DdpRun run{.model = model, .opt = OptKind::kSgd, .micro_steps = 3};
    const std::vector<float> got = ddp(backend, run, 42);
    EXPECT_TRUE(close_to_oracle(expected, got, std::string(model_name(model)) + ", 3 micro-steps",
                                initial_parameters(model, 42)));
    // Buckets of the run (2 KiB cap, 512 B first): one allreduce per bucket per step, none in no_sync.
    nn::Model probe = make_model(model, 42);
    RecordingCommunicator counter(inner);
    lab04::Reducer reducer(counter, probe, with_buckets(probe, run.reducer));
    EXPECT_EQ(backend.count(dtl::CollectiveKind::kAllreduce), kSteps * static_cast<int>(reducer.buckets().size()))
        << model_name(model) << ": allreduces issued inside no_sync()";
  }
}

TEST(NoSync, FinishInsideTheScopeThrows) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  nn::Model model = make_model(ModelKind::kMlp, 3);
  lab04::Reducer reducer(backend, model, with_buckets(model, {}));
  {
    auto scope = reducer.no_sync();
    EXPECT_TRUE(reducer.in_no_sync());
    EXPECT_THROW(reducer.finish(), dtl::Error);
  }
  EXPECT_FALSE(reducer.in_no_sync());
}

TEST(NoSync, RefusedInTheMiddleOfAStepAndInsideAScope) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  nn::Model model = make_model(ModelKind::kMlp, 3);
  lab04::Reducer reducer(backend, model, with_buckets(model, {}));
  {
    auto scope = reducer.no_sync();
    EXPECT_THROW(reducer.no_sync(), dtl::Error) << "rank " << comm().rank() << ": a no_sync() scope inside another";
    EXPECT_TRUE(reducer.in_no_sync()) << "rank " << comm().rank() << ": the refused inner scope ended the outer one";
  }
  // A backward without finish(): its gradients are counted, the step is half done.
  model.zero_grad();
  forward_backward(model, ModelKind::kMlp, 0, 0, kGlobalBatch / comm().size());
  EXPECT_THROW(reducer.no_sync(), dtl::Error) << "rank " << comm().rank() << ": no_sync() after a backward";
  EXPECT_FALSE(reducer.in_no_sync());
  reducer.finish();  // every rank ends the step, so no operation is left pending
}

// ---------------------------------------------------------------------------
// Errors: clear messages, never a hang
// ---------------------------------------------------------------------------

TEST(ReducerErrors, ParameterWithoutGradientIsNamed) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  for (ReducerMode mode : {ReducerMode::kOverlapped, ReducerMode::kBucketed}) {
    nn::Model model = make_model(ModelKind::kMlp, 3);
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(std::make_unique<Unused>());
    model.add_unit("unused", std::move(layers));
    lab04::Reducer reducer(backend, model,
                           with_buckets(model, {.mode = mode, .bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 256}));
    model.zero_grad();
    forward_backward(model, ModelKind::kMlp, 0, 0, kGlobalBatch / comm().size());
    try {
      reducer.finish();
      ADD_FAILURE() << "finish() did not notice that unused.weight got no gradient";
    } catch (const dtl::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("unused.weight"), std::string::npos) << what;
      EXPECT_NE(what.find("bucket 0"), std::string::npos) << what;
    }
  }
}

TEST(ReducerErrors, SecondBackwardWithoutFinishIsNamed) {
  dtl::MpiCommunicator backend(comm(), dtl::MpiMode::kThread);
  nn::Model model = make_model(ModelKind::kMlp, 3);
  lab04::Reducer reducer(backend, model, with_buckets(model, {.mode = ReducerMode::kOverlapped}));
  model.zero_grad();
  forward_backward(model, ModelKind::kMlp, 0, 0, kGlobalBatch / comm().size());
  try {
    forward_backward(model, ModelKind::kMlp, 1, 0, kGlobalBatch / comm().size());
    ADD_FAILURE() << "a second backward without finish() was not noticed";
  } catch (const dtl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head.bias"), std::string::npos) << e.what();
  }
}

TEST(Backends, UnknownNameIsRefused) {
  EXPECT_THROW(lab04::make_communicator("carrier-pigeon", comm()), dtl::InvalidArgument);
  EXPECT_THROW(lab04::make_communicator("emulated:nonsense", comm()), dtl::InvalidArgument);
}

}  // namespace
}  // namespace lab04_test
