// Task B, the ring: for every element type, op and count, reduce_scatter_ring,
// allgather_ring and allreduce_ring give bit-for-bit what Open MPI's own
// collectives give (MPI_Reduce_scatter with the ring's chunk counts,
// MPI_Allgatherv, MPI_Allreduce) on integer-valued data, where any order of
// summation is exact. The PMPI tracer proves that no vendor collective was
// called, that each half sends exactly P-1 messages (2(P-1) for the allreduce),
// and that the bytes are the bandwidth-optimal ones: all but one chunk per half.
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

constexpr int kTag = 3;

TEST(ReduceScatterRing, MatchesVendor) {
  const int rank = comm().rank();
  const int size = comm().size();
  for_each_type([&](auto type) {
    using T = typename decltype(type)::type;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (std::size_t count : sweep_counts()) {
        if (!keep_going()) return;
        const std::string what = case_name("reduce_scatter_ring", type_name<T>(), op, count);
        const std::vector<T> mine = values<T>(count, rank);
        std::vector<T> buf = mine;
        const auto counts = traced([&] { lab03::reduce_scatter_ring<T>(comm(), buf, op, kTag); });
        EXPECT_TRUE(no_vendor_collective(counts, what));
        EXPECT_TRUE(only_tag(counts, kTag, what));

        // The oracle: MPI_Reduce_scatter with the ring's chunk counts, then /P for avg.
        const std::vector<int> chunks = chunk_counts(count);
        std::vector<T> expected(chunks[rank]);
        DTL_MPI_CHECK(MPI_Reduce_scatter(mine.data(), expected.data(), chunks.data(), dtl::mpi_datatype<T>(), MPI_SUM,
                                         comm()));
        if (op == ReduceOp::kAvg) {
          for (T& x : expected) x /= static_cast<T>(size);
        }
        const std::vector<T> got(buf.begin() + static_cast<std::ptrdiff_t>(chunk_begin(count, size, rank)),
                                 buf.begin() + static_cast<std::ptrdiff_t>(chunk_begin(count, size, rank + 1)));
        EXPECT_TRUE(buffers_equal(expected, got, "chunk " + std::to_string(rank) + " of buf (" + what + ")"));
        if (count == 0) {
          EXPECT_EQ(counts.messages_sent, 0) << "rank " << rank << ": an empty buffer needs no message (" << what << ")";
          continue;
        }
        EXPECT_EQ(counts.messages_sent, size - 1)
            << "rank " << rank << ": the reduce-scatter sends one message per step, P-1 = " << size - 1
            << " in all, empty chunks included (" << what << ")";
        EXPECT_EQ(counts.bytes_sent, reduce_scatter_elements(count) * static_cast<std::int64_t>(sizeof(T)))
            << "rank " << rank << ": bandwidth-optimal means sending every chunk but your own, once (" << what << ")";
      }
    }
  });
}

TEST(AllgatherRing, MatchesVendor) {
  const int rank = comm().rank();
  const int size = comm().size();
  for_each_type([&](auto type) {
    using T = typename decltype(type)::type;
    for (std::size_t count : sweep_counts()) {
      if (!keep_going()) return;
      const std::string what = "allgather_ring, " + type_name<T>() + ", count " + std::to_string(count);
      // Chunk `rank` holds this rank's part; the rest is garbage the ring must overwrite.
      const std::vector<T> mine = values<T>(count, rank);
      std::vector<T> buf(count, T{-77});
      const std::size_t begin = chunk_begin(count, size, rank);
      const std::vector<int> chunks = chunk_counts(count);
      std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(begin), chunks[rank],
                  buf.begin() + static_cast<std::ptrdiff_t>(begin));
      const auto counts = traced([&] { lab03::allgather_ring<T>(comm(), buf, kTag); });
      EXPECT_TRUE(no_vendor_collective(counts, what));
      EXPECT_TRUE(only_tag(counts, kTag, what));

      std::vector<int> displs(size);
      for (int c = 0; c < size; ++c) displs[c] = static_cast<int>(chunk_begin(count, size, c));
      std::vector<T> expected(count);
      DTL_MPI_CHECK(MPI_Allgatherv(mine.data() + begin, chunks[rank], dtl::mpi_datatype<T>(), expected.data(),
                                   chunks.data(), displs.data(), dtl::mpi_datatype<T>(), comm()));
      EXPECT_TRUE(buffers_equal(expected, buf, "buf (" + what + ")"));
      if (count == 0) continue;
      EXPECT_EQ(counts.messages_sent, size - 1) << "rank " << rank << ": one message per step (" << what << ")";
      EXPECT_EQ(counts.bytes_sent, allgather_elements(count) * static_cast<std::int64_t>(sizeof(T)))
          << "rank " << rank << ": every chunk but your right neighbour's, once (" << what << ")";
    }
  });
}

TEST(AllreduceRing, MatchesVendor) {
  const int rank = comm().rank();
  const int size = comm().size();
  for_each_type([&](auto type) {
    using T = typename decltype(type)::type;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (std::size_t count : sweep_counts(std::is_same_v<T, float>)) {
        if (!keep_going()) return;
        const std::string what = case_name("allreduce_ring", type_name<T>(), op, count);
        const std::vector<T> mine = values<T>(count, rank);
        std::vector<T> buf = mine;
        const auto counts = traced([&] { lab03::allreduce_ring<T>(comm(), buf, op, kTag); });
        EXPECT_TRUE(no_vendor_collective(counts, what));
        EXPECT_TRUE(only_tag(counts, kTag, what));
        EXPECT_TRUE(buffers_equal(vendor_allreduce(mine, op), buf, "buf (" + what + ")"));
        if (count == 0) continue;
        EXPECT_EQ(counts.messages_sent, 2 * (size - 1))
            << "rank " << rank << ": the ring allreduce takes 2(P-1) = " << 2 * (size - 1) << " steps, one message each ("
            << what << ")";
        const std::int64_t elements = reduce_scatter_elements(count) + allgather_elements(count);
        EXPECT_EQ(counts.bytes_sent, elements * static_cast<std::int64_t>(sizeof(T)))
            << "rank " << rank << ": about 2(P-1)/P of the buffer, all but one chunk per half (" << what << ")";
        // Over all ranks that is exactly 2(P-1) buffers: the lower bound for any allreduce.
        EXPECT_EQ(sum_over_ranks(counts.bytes_sent),
                  2 * (size - 1) * static_cast<std::int64_t>(count * sizeof(T)))
            << "all ranks together send 2(P-1) n bytes (" << what << ")";
      }
    }
  });
}

TEST(AllreduceRing, AverageDividesOnceAtTheEnd) {
  // 1 + 1 + ... + 1 over P ranks, averaged: 1 exactly when dividing once; 0 for
  // integers that divide each term first (1/P truncates to 0). The float part
  // (0.1 summed P times, then one division) tells the two apart only where P is
  // not a power of two; the int part does it at every P > 1.
  const int size = comm().size();
  std::vector<std::int32_t> ints(10, 1);
  lab03::allreduce_ring<std::int32_t>(comm(), ints, ReduceOp::kAvg, kTag);
  EXPECT_TRUE(buffers_equal(std::vector<std::int32_t>(10, 1), ints, "int32 average of ones"));
  std::vector<float> floats(10, 0.1f);
  lab03::allreduce_ring<float>(comm(), floats, ReduceOp::kAvg, kTag);
  std::vector<float> expected(10, 0.1f);
  for (float& x : expected) {
    float sum = 0;
    for (int r = 0; r < size; ++r) sum += x;
    x = sum / static_cast<float>(size);
  }
  EXPECT_TRUE(buffers_equal(expected, floats, "float average of 0.1 (sum in rank order, then one division)"));
}

TEST(AllreduceRing, RejectsBadArguments) {
  std::vector<float> buf(8, 1.0f);
  for (int tag : {-1, 32768}) {
    EXPECT_THROW(lab03::reduce_scatter_ring<float>(comm(), buf, ReduceOp::kSum, tag), dtl::InvalidArgument) << "tag " << tag;
    EXPECT_THROW(lab03::allgather_ring<float>(comm(), buf, tag), dtl::InvalidArgument) << "tag " << tag;
    EXPECT_THROW(lab03::allreduce_ring<float>(comm(), buf, ReduceOp::kSum, tag), dtl::InvalidArgument) << "tag " << tag;
  }
  try {
    lab03::allreduce_ring<float>(comm(), buf, ReduceOp::kSum, -1);
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tag"), std::string::npos) << "the error names the argument: " << e.what();
  } catch (...) {
  }
}

}  // namespace
