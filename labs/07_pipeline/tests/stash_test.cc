// Lab 07: weight stashing (task D). The stash on its own (one process, exact
// bits), then PipeDream's asynchronous 1F1B through the executor: the weights a
// micro-batch's backward really computes with (read by the test's own model
// hooks) are those its forward used, and without the stash they are not.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/error.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {
namespace {

void set_all(const nn::Tensor& t, float v) {
  for (float& x : t.span<float>()) x = v;
}

TEST(WeightStash, BackwardSeesTheForwardsWeightsThenTheNewestAreBack) {
  const nn::Tensor w = nn::Tensor::zeros({5}, nn::DType::kF32, nn::MemoryCategory::kParameters);
  lab07::WeightStash stash(w);
  set_all(w, 1.0f);
  stash.save(0, 0);  // F0 with version 0 (all ones)
  set_all(w, 2.0f);
  stash.save(1, 1);  // F1 with version 1 (all twos)
  set_all(w, 3.0f);  // the newest: version 2
  w.span<float>()[4] = 3.5f;
  EXPECT_EQ(stash.stashed(), 2);
  EXPECT_EQ(stash.begin_backward(0), 0);
  EXPECT_EQ(contents(w), (std::vector<float>{1, 1, 1, 1, 1})) << "B0 must compute with F0's weights";
  stash.end_backward(0);
  EXPECT_EQ(contents(w), (std::vector<float>{3, 3, 3, 3, 3.5f})) << "after B0 the newest weights are back";
  EXPECT_EQ(stash.stashed(), 1);
  EXPECT_EQ(stash.begin_backward(1), 1);
  EXPECT_EQ(contents(w), (std::vector<float>{2, 2, 2, 2, 2}));
  stash.end_backward(1);
  EXPECT_EQ(contents(w), (std::vector<float>{3, 3, 3, 3, 3.5f}));
  EXPECT_EQ(stash.stashed(), 0);
  EXPECT_EQ(stash.peak_stashed(), 2);
  // A micro-batch index can be used again once its backward ended (the next step).
  stash.save(0, 7);
  EXPECT_EQ(stash.begin_backward(0), 7);
  stash.end_backward(0);
}

TEST(WeightStash, CopiesAreChargedToParameters) {
  const nn::Tensor w = nn::Tensor::zeros({1000}, nn::DType::kF32, nn::MemoryCategory::kParameters);
  lab07::WeightStash stash(w);
  auto& tracker = nn::memory_tracker();
  const std::int64_t before = tracker.current(nn::MemoryCategory::kParameters);
  stash.save(0, 0);
  stash.save(1, 0);
  stash.save(2, 0);
  EXPECT_EQ(tracker.current(nn::MemoryCategory::kParameters) - before, 3 * 4000) << "three copies of 1000 floats";
  for (int i = 0; i < 3; ++i) {
    stash.begin_backward(i);
    stash.end_backward(i);
  }
  EXPECT_EQ(tracker.current(nn::MemoryCategory::kParameters) - before, 0) << "copies left after their backward";
}

TEST(WeightStash, MisuseIsNamed) {
  const nn::Tensor w = nn::Tensor::zeros({3}, nn::DType::kF32, nn::MemoryCategory::kParameters);
  lab07::WeightStash stash(w);
  EXPECT_THROW(stash.begin_backward(0), dtl::InvalidArgument);  // never saved
  stash.save(0, 0);
  EXPECT_THROW(stash.save(0, 1), dtl::InvalidArgument);  // saved twice
  stash.save(1, 0);
  stash.begin_backward(0);
  EXPECT_THROW(stash.begin_backward(1), dtl::InvalidArgument);  // B0 has not ended
  EXPECT_THROW(stash.end_backward(1), dtl::InvalidArgument);    // not the one that began
  stash.end_backward(0);
  const nn::Tensor ints = nn::Tensor::zeros({3}, nn::DType::kI32, nn::MemoryCategory::kOther);
  EXPECT_THROW(lab07::WeightStash{ints}, dtl::InvalidArgument);
}

/// In PipeDream's asynchronous 1F1B every backward is followed by an update, so F(i)
/// computes with the version "number of backwards before F(i)" in the stage's order
/// (run_async() runs the test's own 1F1B order, pipeline_test_util.h).
std::vector<int> forward_versions(int P, int s, int m) {
  std::vector<int> version;
  int updates = 0;
  for (const Action& a : one_f_one_b_order(P, s, m)) {
    if (a.pass == Pass::kForward) version.push_back(updates);
    else ++updates;
  }
  return version;
}

TEST(Stash, EachBackwardUsesItsForwardsWeights) {
  const int P = comm().size(), s = comm().rank();
  const int m = 6;
  const AsyncRun run = run_async(true, m);
  const std::vector<int> version = forward_versions(P, s, m);
  for (const lab07::Event& e : run.events) {
    const int i = e.micro_batch;
    const int want = version[static_cast<std::size_t>(i)];
    if (e.pass == Pass::kForward) {
      EXPECT_EQ(e.version, want) << "stage " << s << ": F" << i << "'s weight version";
    } else {
      EXPECT_EQ(e.version, want) << "stage " << s << ": B" << i << " must compute with its forward's version";
    }
  }
  for (int i = 0; i < m; ++i) {
    EXPECT_TRUE(run.forward_weights[static_cast<std::size_t>(i)] == run.backward_weights[static_cast<std::size_t>(i)])
        << "stage " << s << ": B" << i << " computed with other weights than F" << i;
  }
}

// The reason for the stash: without it, on every stage but the last, some backward
// computes with newer weights than its forward did (version i instead of F(i)'s).
TEST(Stash, WithoutItTheVersionsAreMixed) {
  const int P = comm().size(), s = comm().rank();
  const int m = 6;
  const AsyncRun run = run_async(false, m);
  const std::vector<int> version = forward_versions(P, s, m);
  int stale = 0;  // micro-batches whose forward saw fewer updates than their backward will
  for (int i = 0; i < m; ++i) stale += version[static_cast<std::size_t>(i)] != i ? 1 : 0;
  int mixed = 0;
  for (int i = 0; i < m; ++i) {
    if (run.forward_weights[static_cast<std::size_t>(i)] != run.backward_weights[static_cast<std::size_t>(i)]) ++mixed;
  }
  for (const lab07::Event& e : run.events) {
    if (e.pass == Pass::kBackward) {
      EXPECT_EQ(e.version, e.micro_batch) << "without a stash B(i) sees version i";
    }
  }
  // B(i) runs after i updates; F(i) ran after fewer wherever the stage warmed up.
  EXPECT_EQ(mixed, stale) << "stage " << s << " of " << P;
  if (s + 1 < P) {
    EXPECT_GT(mixed, 0) << "stage " << s << " of " << P << ": a warm-up without mixed versions";
  }
}

}  // namespace
}  // namespace lab07_test
