// PeerLink on the CPU: MpiPeerLink's tagged messages (a receive gets the send of
// its tag whatever the order of issue), its refusals of bad arguments (naming the
// argument and the rank), and StreamModelPeerLink's two findings, each planted:
// a received buffer read before its wait, and two ranks issuing their messages to
// each other in different orders (what NCCL, which pairs by order, gets wrong).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "harness/comm/peer_link.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/stream_model_peer_link.h"

namespace {

using dtl::testing::comm;

// Rank r's message of tag t to r + 1: t + 1 elements (uneven counts), r * 100 + t + k / 8.
std::vector<float> message(int rank, int tag) {
  std::vector<float> v(static_cast<std::size_t>(tag) + 1);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(rank * 100 + tag) + static_cast<float>(k) / 8;
  return v;
}

TEST(MpiPeerLink, TagsMatchWhateverTheOrderOfIssue) {
  const int P = comm().size(), r = comm().rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  dtl::MpiPeerLink link(comm());
  EXPECT_EQ(link.rank(), r);
  EXPECT_EQ(link.size(), P);
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  constexpr int kTags = 4;
  std::vector<std::vector<float>> out(kTags), in(kTags);
  std::vector<dtl::Work> sends, receives;
  for (int t = 0; t < kTags; ++t) in[static_cast<std::size_t>(t)].assign(static_cast<std::size_t>(t) + 1, -1.0f);
  for (int t = 0; t < kTags; ++t) {  // receives in tag order
    receives.push_back(link.irecv(in[static_cast<std::size_t>(t)].data(), static_cast<std::size_t>(t) + 1,
                                  dtl::DType::kF32, left, t));
  }
  for (int t = kTags - 1; t >= 0; --t) {  // sends in reverse
    out[static_cast<std::size_t>(t)] = message(r, t);
    sends.push_back(link.isend(out[static_cast<std::size_t>(t)].data(), static_cast<std::size_t>(t) + 1,
                               dtl::DType::kF32, right, t));
  }
  for (dtl::Work& w : receives) w.wait();
  for (dtl::Work& w : sends) w.wait();
  for (int t = 0; t < kTags; ++t) EXPECT_EQ(in[static_cast<std::size_t>(t)], message(left, t)) << "tag " << t;
}

TEST(MpiPeerLink, BadArgumentsNameTheArgumentAndTheRank) {
  const int P = comm().size(), r = comm().rank();
  dtl::MpiPeerLink link(comm());
  float x = 0.0f;
  const std::string on = "on rank " + std::to_string(r);
  auto expect_invalid = [&](auto call, const std::string& argument) {
    try {
      call();
      ADD_FAILURE() << "no error for a bad " << argument;
    } catch (const dtl::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(argument), std::string::npos) << what;
      EXPECT_NE(what.find(on), std::string::npos) << what;
    }
  };
  expect_invalid([&] { link.isend(&x, 1, dtl::DType::kF32, r, 0); }, "peer");        // itself
  expect_invalid([&] { link.irecv(&x, 1, dtl::DType::kF32, P, 0); }, "peer");        // out of range
  expect_invalid([&] { link.irecv(&x, 1, dtl::DType::kF32, -1, 0); }, "peer");
  if (P >= 2) {
    const int other = (r + 1) % P;
    expect_invalid([&] { link.isend(&x, 1, dtl::DType::kF32, other, -3); }, "tag");
    expect_invalid([&] { link.isend(&x, 0, dtl::DType::kF32, other, 0); }, "count");
    expect_invalid([&] { link.irecv(nullptr, 1, dtl::DType::kF32, other, 0); }, "buf");
  }
}

TEST(StreamModelPeerLink, FindsAReceiveReadBeforeItsWait) {
  const int P = comm().size(), r = comm().rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  dtl::MpiCommunicator unused(comm(), dtl::MpiMode::kNonblocking);
  dtl::testing::StreamModelCommunicator log(unused);
  dtl::MpiPeerLink mpi(comm());
  dtl::testing::StreamModelPeerLink link(mpi, log);
  std::vector<float> in(8, 0.0f), out = message(r, 7);
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  dtl::Work recv = link.irecv(in.data(), in.size(), dtl::DType::kF32, left, 7);
  dtl::Work send = link.isend(out.data(), out.size(), dtl::DType::kF32, right, 7);
  log.compute_reads(in.data(), in.size() * sizeof(float), "a kernel reads the activation");  // planted: before wait
  recv.wait();
  send.wait();
  const std::string found = log.check();
  EXPECT_NE(found.find("'a kernel reads the activation'"), std::string::npos) << found;
  EXPECT_NE(found.find("while it is in flight"), std::string::npos) << found;
  // In the right order it is clean, and so is the order of the messages.
  log.clear();
  link.clear();
  recv = link.irecv(in.data(), in.size(), dtl::DType::kF32, left, 7);
  send = link.isend(out.data(), out.size(), dtl::DType::kF32, right, 7);
  recv.wait();
  log.compute_reads(in.data(), in.size() * sizeof(float), "a kernel reads the activation");
  send.wait();
  EXPECT_EQ(log.check(), "");
  EXPECT_EQ(link.order_mismatch(comm()), "");
  EXPECT_EQ(in, message(left, 7));
}

TEST(StreamModelPeerLink, FindsMessagesIssuedInAnotherOrderThanReceived) {
  const int P = comm().size(), r = comm().rank();
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  dtl::MpiCommunicator unused(comm(), dtl::MpiMode::kNonblocking);
  dtl::testing::StreamModelCommunicator log(unused);
  dtl::MpiPeerLink mpi(comm());
  dtl::testing::StreamModelPeerLink link(mpi, log);
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  float a = 1.0f, b = 2.0f, got_a = 0.0f, got_b = 0.0f;
  dtl::Work r0 = link.irecv(&got_a, 1, dtl::DType::kF32, left, 0);
  dtl::Work r1 = link.irecv(&got_b, 1, dtl::DType::kF32, left, 1);
  // Rank 0 sends tag 1 first (planted); the others tag 0 first.
  dtl::Work s_first = link.isend(r == 0 ? &b : &a, 1, dtl::DType::kF32, right, r == 0 ? 1 : 0);
  dtl::Work s_second = link.isend(r == 0 ? &a : &b, 1, dtl::DType::kF32, right, r == 0 ? 0 : 1);
  r0.wait();
  r1.wait();
  s_first.wait();
  s_second.wait();
  EXPECT_EQ(got_a, 1.0f);  // MPI matched the tags: right over MPI
  EXPECT_EQ(got_b, 2.0f);
  const std::string found = link.order_mismatch(comm());
  if (r == 1 % P) {
    EXPECT_NE(found.find("rank 0 sent tags [1 0] to rank " + std::to_string(r)), std::string::npos) << found;
  } else {
    EXPECT_EQ(found, "");
  }
  EXPECT_EQ(log.check(), "");
}

}  // namespace
