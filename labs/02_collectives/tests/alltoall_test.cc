// Task E, alltoall: for every count and element type the result equals
// MPI_Alltoall's, no vendor collective is called, and the tracer sees pairwise
// exchange — exactly P - 1 messages per rank, one block each (nothing sent to
// itself), and P - 1 receives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective_test_util.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace {

using namespace lab02_test;
using dtl::testing::buffers_equal;

constexpr int kTag = 9;

template <typename T>
void check_alltoall() {
  const int rank = comm().rank();
  const int size = comm().size();
  for (std::size_t count : sweep_counts()) {  // count = elements per block
    if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
    const std::string what = "alltoall_pairwise, " + case_name(type_name<T>(), -1, count);
    const std::vector<T> send = values<T>(size * count, rank);
    std::vector<T> recv(size * count, T{-1});
    const auto counts = traced([&] { dtl::lab02::alltoall_pairwise<T>(comm(), send, recv, kTag); });
    EXPECT_TRUE(no_vendor_collective(counts, what));
    EXPECT_TRUE(only_tag(counts, kTag, what));

    std::vector<T> expected(size * count, T{-1});
    const int n = static_cast<int>(count);
    DTL_MPI_CHECK(MPI_Alltoall(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(),
                               comm()));
    EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
    if (count == 0) continue;
    EXPECT_EQ(counts.messages_sent, size - 1)
        << "rank " << rank << ": pairwise exchange sends one block to each other rank, P - 1 messages; the own "
        << "block is copied, not sent (" << what << ")";
    EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((size - 1) * count * sizeof(T)))
        << "rank " << rank << ": one block per message (" << what << ")";
    EXPECT_EQ(receives(counts), size - 1) << "rank " << rank << ": one receive per other rank (" << what << ")";
  }
}

TEST(Alltoall, PairwiseMatchesVendor) {
  for_each_type([](auto type) { check_alltoall<typename decltype(type)::type>(); });
}

TEST(Alltoall, RejectsBadArguments) {
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  using dtl::lab02::alltoall_pairwise;
  const int size = comm().size();
  const std::vector<float> send(2 * size), uneven(2 * size + 1);
  std::vector<float> recv(2 * size), too_long(2 * size + 1);
  if (size > 1) {  // every count is a multiple of 1
    EXPECT_THAT([&] { alltoall_pairwise<float>(comm(), uneven, too_long, 0); },
                ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'send_buf'")));
  }
  EXPECT_THAT([&] { alltoall_pairwise<float>(comm(), send, too_long, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { alltoall_pairwise<float>(comm(), send, recv, 40000); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'tag'")));
}

}  // namespace
