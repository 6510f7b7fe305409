// Task C, reduce: for every operator, root, count and element type the root's
// result equals MPI_Reduce's bit for bit (integer-valued data: sums are exact in
// any order), no vendor collective is called, and the tracer sees a binomial tree —
// every non-root sends exactly one message of the whole vector, the root sends
// nothing and receives one message per round, ceil(log2 P).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "collective_test_util.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace {

using namespace lab02_test;
using dtl::ReduceOp;
using dtl::testing::buffers_equal;

constexpr int kTag = 7;

const std::vector<std::pair<ReduceOp, MPI_Op>> kOps = {
    {ReduceOp::kSum, MPI_SUM}, {ReduceOp::kMax, MPI_MAX}, {ReduceOp::kMin, MPI_MIN}};
const char* op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "min"; }

template <typename T>
void check_reduce(ReduceOp op, MPI_Op vendor_op) {
  const int rank = comm().rank();
  const int rounds = ceil_log2(comm().size());
  for (int root = 0; root < comm().size(); ++root) {
    for (std::size_t count : sweep_counts()) {
      if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
      const std::string what = std::string("reduce ") + op_name(op) + ", " + case_name(type_name<T>(), root, count);
      const std::vector<T> send = values<T>(count, rank);
      std::vector<T> recv(rank == root ? count : 0, T{-1});  // non-roots may pass an empty recv_buf
      const auto counts = traced([&] { dtl::lab02::reduce<T>(comm(), send, recv, op, root, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      EXPECT_TRUE(only_tag(counts, kTag, what));

      std::vector<T> expected(recv.size(), T{-1});
      DTL_MPI_CHECK(MPI_Reduce(send.data(), expected.data(), static_cast<int>(count), dtl::mpi_datatype<T>(),
                               vendor_op, root, comm()));
      EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
      if (count == 0) continue;
      EXPECT_EQ(counts.messages_sent, rank == root ? 0 : 1)
          << "rank " << rank << ": in a reduction tree every rank but the root sends exactly one message, its "
          << "partial result (" << what << ")";
      EXPECT_EQ(counts.bytes_sent, counts.messages_sent * static_cast<std::int64_t>(count * sizeof(T)))
          << "rank " << rank << ": a partial result is the whole vector, one message (" << what << ")";
      EXPECT_LE(receives(counts), rounds) << "rank " << rank << ": at most one child per round, ceil(log2 P) = "
                                          << rounds << " (" << what << ")";
      if (rank == root) {
        EXPECT_EQ(receives(counts), rounds)
            << "rank " << rank << " (the root): one partial result per round of the tree, not one per rank (" << what
            << ")";
      }
    }
  }
}

TEST(Reduce, BinomialTreeMatchesVendor) {
  for (const auto& [op, vendor_op] : kOps) {
    for_each_type([&](auto type) { check_reduce<typename decltype(type)::type>(op, vendor_op); });
  }
}

TEST(Reduce, RejectsBadArguments) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  using dtl::InvalidArgument;
  using dtl::lab02::reduce;
  const int size = comm().size();
  const std::vector<double> send(6);
  std::vector<double> recv(6), too_long(7);  // too_long is wrong on every rank: neither empty nor 6
  for (int bad_root : {-1, size}) {
    EXPECT_THAT([&] { reduce<double>(comm(), send, recv, ReduceOp::kSum, bad_root, 0); },
                ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("'root'"), HasSubstr("rank "))));
  }
  EXPECT_THAT([&] { reduce<double>(comm(), send, recv, ReduceOp::kMax, 0, -1); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  EXPECT_THAT([&] { reduce<double>(comm(), send, too_long, ReduceOp::kMin, 0, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { reduce<double>(comm(), send, recv, static_cast<ReduceOp>(42), 0, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'op'")));
}

}  // namespace
