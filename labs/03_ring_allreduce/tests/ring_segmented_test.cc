// Task C, the segmented ring: the same results as MPI_Allreduce for every
// element type, op, count and segment size (one element, a few, more than a
// chunk); the same bytes as the plain ring; one message per segment, so the
// message count is the sum of segments_of() over the chunks a rank sends; and
// only nonblocking calls, since overlap is the point of it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/error.h"
#include "lab03/ring.h"
#include "ring_test_util.h"

namespace {

using namespace lab03_test;
using dtl::testing::buffers_equal;
namespace lab03 = dtl::lab03;

constexpr int kTag = 5;

// Messages this rank sends: one per segment of every chunk it sends (all but its
// own in the reduce-scatter, all but its right neighbour's in the allgather).
std::int64_t expected_messages(std::size_t count, std::size_t segment) {
  const int p = comm().size();
  const int rank = comm().rank();
  std::int64_t messages = 0;
  for (int c = 0; c < p; ++c) {
    const auto segments = static_cast<std::int64_t>(lab03::segments_of(chunk_count(count, p, c), segment));
    if (c != rank) messages += segments;
    if (c != (rank + 1) % p) messages += segments;
  }
  return messages;
}

TEST(AllreduceRingSegmented, MatchesVendor) {
  const int rank = comm().rank();
  const int size = comm().size();
  for_each_type([&](auto type) {
    using T = typename decltype(type)::type;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (std::size_t count : sweep_counts(std::is_same_v<T, float>)) {
        for (std::size_t segment : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 22}) {
          // Tiny segments of a large buffer mean 10^5 requests in flight, which MPI
          // handles slowly (see ring_segmented.cc); they prove nothing more.
          if (segment * 1000 < count / static_cast<std::size_t>(size)) continue;
          if (!keep_going()) return;
          const std::string what =
              case_name("allreduce_ring_segmented", type_name<T>(), op, count) + ", segment " + std::to_string(segment);
          const std::vector<T> mine = values<T>(count, rank);
          std::vector<T> buf = mine;
          const auto counts = traced([&] { lab03::allreduce_ring_segmented<T>(comm(), buf, op, kTag, segment); });
          EXPECT_TRUE(no_vendor_collective(counts, what));
          EXPECT_TRUE(only_tag(counts, kTag, what));
          EXPECT_TRUE(only_nonblocking(counts, what));
          EXPECT_TRUE(buffers_equal(vendor_allreduce(mine, op), buf, "buf (" + what + ")"));
          if (count == 0 || size == 1) {
            EXPECT_EQ(counts.messages_sent, 0) << "rank " << rank << ": nothing to send (" << what << ")";
            continue;
          }
          EXPECT_EQ(counts.messages_sent, expected_messages(count, segment))
              << "rank " << rank << ": one message per segment of every chunk sent (" << what << ")";
          const std::int64_t elements = reduce_scatter_elements(count) + allgather_elements(count);
          EXPECT_EQ(counts.bytes_sent, elements * static_cast<std::int64_t>(sizeof(T)))
              << "rank " << rank << ": segmenting changes the messages, not the bytes (" << what << ")";
        }
      }
    }
  });
}

TEST(AllreduceRingSegmented, RejectsBadArguments) {
  std::vector<float> buf(8, 1.0f);
  EXPECT_THROW(lab03::allreduce_ring_segmented<float>(comm(), buf, ReduceOp::kSum, kTag, 0), dtl::InvalidArgument)
      << "segment_elements 0";
  EXPECT_THROW(lab03::allreduce_ring_segmented<float>(comm(), buf, ReduceOp::kSum, -1, 16), dtl::InvalidArgument)
      << "tag -1";
  try {
    lab03::allreduce_ring_segmented<float>(comm(), buf, ReduceOp::kSum, kTag, 0);
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("segment_elements"), std::string::npos)
        << "the error names the argument: " << e.what();
  } catch (...) {
  }
}

}  // namespace
