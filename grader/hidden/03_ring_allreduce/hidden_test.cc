// Hidden tests for lab 03, part 1 (the ring over MPI). Every property the public
// tests check is checked again here, on inputs the public tests never use, for each
// function on its own (reduce_scatter_ring and allgather_ring too, not only through
// allreduce_ring), so that code tuned to the public tests fails:
//
//   - the result, bit for bit, against Open MPI's collectives on the same
//     communicator (MPI_Reduce_scatter with the ring's chunk counts, MPI_Allgatherv,
//     MPI_Allreduce), divided by P once for the average;
//   - no vendor collective; every message with the tag argument; no wildcard
//     receive; and two empty messages with other tags from each neighbour in flight
//     during the call, which must still be waiting afterwards;
//   - the bandwidth-optimal shape from the tracer: P - 1 messages per half (one per
//     segment for the segmented ring, only nonblocking calls there), all but one
//     chunk per half in bytes, 2(P-1) n bytes over all ranks for the allreduce;
//   - at 6 and 7 ranks, counts 0, 1, fewer than the ranks, divisible by them, not
//     divisible, and large, tags 0, 77, 4321 and 32767, segment sizes 2, 33, 1000 and
//     one more than a chunk, and communicators whose ranks are not MPI_COMM_WORLD's
//     (the world reversed, two halves): code that talks on MPI_COMM_WORLD or uses
//     world ranks gets the wrong data or hangs there.
//
// Every rank makes the same calls in the same order: no ASSERT_, and a sweep stops
// on all ranks of its communicator together after the first failing case.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/error.h"
#include "labs/03_ring_allreduce/tests/ring_test_util.h"

namespace {

using namespace lab03_test;  // comm(), values(), traced(), no_vendor_collective(), only_tag(), only_nonblocking(), ...
using dtl::testing::buffers_equal;
namespace lab03 = dtl::lab03;

// ---------------------------------------------------------------------------
// Communicators, cases, decoys
// ---------------------------------------------------------------------------

// split_comm(), on_each_communicator(), keep_going_on(), with_type(), Decoys and
// run_checked() are harness/testing/collective_checks.h's.

// Counts a public test never sweeps at 6 or 7 ranks (and the smaller ones of the halves).
std::vector<std::size_t> hidden_counts(int p) {
  const auto n = static_cast<std::size_t>(p);
  return {0, 1, n > 2 ? n - 2 : 1, 2 * n, 5 * n - 1, 65539};
}

std::string describe(const std::string& function, const std::string& type, ReduceOp op, std::size_t count, int tag,
                     const dtl::Comm& on, const std::string& where) {
  return case_name(function, type, op, count) + ", tag " + std::to_string(tag) + ", on " + where + " (rank " +
         std::to_string(on.rank()) + " of " + std::to_string(on.size()) + ")";
}

// The oracle on `on`: MPI_Allreduce's sum, divided by P afterwards for the average.
template <typename T>
std::vector<T> vendor_allreduce_on(const dtl::Comm& on, const std::vector<T>& mine, ReduceOp op) {
  std::vector<T> sum(mine.size());
  DTL_MPI_CHECK(MPI_Allreduce(mine.data(), sum.data(), static_cast<int>(mine.size()), dtl::mpi_datatype<T>(),
                              MPI_SUM, on));
  if (op == ReduceOp::kAvg) {
    for (T& x : sum) x /= static_cast<T>(on.size());
  }
  return sum;
}

// Elements each half of a bandwidth-optimal ring sends from `rank` of `p`: every
// chunk but its own (reduce-scatter), every chunk but its right neighbour's (allgather).
std::int64_t reduce_scatter_sends(std::size_t count, int p, int rank) {
  return static_cast<std::int64_t>(count - chunk_count(count, p, rank));
}
std::int64_t allgather_sends(std::size_t count, int p, int rank) {
  return static_cast<std::int64_t>(count - chunk_count(count, p, (rank + 1) % p));
}

// ---------------------------------------------------------------------------
// Task B: the ring, each half on its own and together
// ---------------------------------------------------------------------------

template <typename T>
void check_reduce_scatter(const dtl::Comm& on, const std::string& where, ReduceOp op, std::size_t count, int tag) {
  const int rank = on.rank(), p = on.size();
  const std::string what = describe("reduce_scatter_ring", type_name<T>(), op, count, tag, on, where);
  const std::vector<T> mine = values<T>(count, 2 * rank + 5);
  std::vector<T> buf = mine;
  const auto counts = run_checked(on, tag, what, [&] { lab03::reduce_scatter_ring<T>(on, buf, op, tag); });
  std::vector<int> chunks(p);
  for (int c = 0; c < p; ++c) chunks[c] = static_cast<int>(chunk_count(count, p, c));
  std::vector<T> expected(chunks[rank]);
  DTL_MPI_CHECK(MPI_Reduce_scatter(mine.data(), expected.data(), chunks.data(), dtl::mpi_datatype<T>(), MPI_SUM, on));
  if (op == ReduceOp::kAvg) {
    for (T& x : expected) x /= static_cast<T>(p);
  }
  const auto begin = buf.begin() + static_cast<std::ptrdiff_t>(chunk_begin(count, p, rank));
  EXPECT_TRUE(buffers_equal(expected, std::vector<T>(begin, begin + chunks[rank]),
                            "chunk " + std::to_string(rank) + " of buf (" + what + ")"));
  EXPECT_EQ(counts.messages_sent, count == 0 ? 0 : p - 1) << what << ": one message per step, empty chunks included";
  EXPECT_EQ(counts.bytes_sent, reduce_scatter_sends(count, p, rank) * static_cast<std::int64_t>(sizeof(T)))
      << what << ": every chunk but your own, once";
}

TEST(HiddenRing, ReduceScatterOnItsOwn) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 0;
    for (std::size_t count : hidden_counts(on.size())) {
      for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kSum}) {
        if (!keep_going_on(on)) return;
        with_type(k++, [&](auto type) {
          check_reduce_scatter<typename decltype(type)::type>(on, where, op, count, 77);
        });
      }
    }
  });
}

template <typename T>
void check_allgather(const dtl::Comm& on, const std::string& where, std::size_t count, int tag) {
  const int rank = on.rank(), p = on.size();
  const std::string what = describe("allgather_ring", type_name<T>(), ReduceOp::kSum, count, tag, on, where);
  // Chunk `rank` holds this rank's part; the rest is garbage the ring must overwrite.
  const std::vector<T> mine = values<T>(count, rank + 11);
  const std::size_t begin = chunk_begin(count, p, rank), n = chunk_count(count, p, rank);
  std::vector<T> buf(count, T{-99});
  std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(begin), n, buf.begin() + static_cast<std::ptrdiff_t>(begin));
  const auto counts = run_checked(on, tag, what, [&] { lab03::allgather_ring<T>(on, buf, tag); });
  std::vector<int> chunks(p), displs(p);
  for (int c = 0; c < p; ++c) {
    chunks[c] = static_cast<int>(chunk_count(count, p, c));
    displs[c] = static_cast<int>(chunk_begin(count, p, c));
  }
  std::vector<T> expected(count);
  DTL_MPI_CHECK(MPI_Allgatherv(mine.data() + begin, static_cast<int>(n), dtl::mpi_datatype<T>(), expected.data(),
                               chunks.data(), displs.data(), dtl::mpi_datatype<T>(), on));
  EXPECT_TRUE(buffers_equal(expected, buf, "buf (" + what + ")"));
  EXPECT_EQ(counts.messages_sent, count == 0 ? 0 : p - 1) << what << ": one message per step";
  EXPECT_EQ(counts.bytes_sent, allgather_sends(count, p, rank) * static_cast<std::int64_t>(sizeof(T)))
      << what << ": every chunk but your right neighbour's, once";
}

TEST(HiddenRing, AllgatherOnItsOwn) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 2;
    for (std::size_t count : hidden_counts(on.size())) {
      if (!keep_going_on(on)) return;
      with_type(k++, [&](auto type) { check_allgather<typename decltype(type)::type>(on, where, count, 4321); });
    }
  });
}

template <typename T>
void check_allreduce(const dtl::Comm& on, const std::string& where, ReduceOp op, std::size_t count, int tag) {
  const int rank = on.rank(), p = on.size();
  const std::string what = describe("allreduce_ring", type_name<T>(), op, count, tag, on, where);
  const std::vector<T> mine = values<T>(count, 4 * rank + 3);
  std::vector<T> buf = mine;
  const auto counts = run_checked(on, tag, what, [&] { lab03::allreduce_ring<T>(on, buf, op, tag); });
  EXPECT_TRUE(buffers_equal(vendor_allreduce_on(on, mine, op), buf, "buf (" + what + ")"));
  EXPECT_EQ(counts.messages_sent, count == 0 ? 0 : 2 * (p - 1)) << what << ": 2(P-1) steps, one message each";
  const std::int64_t elements = reduce_scatter_sends(count, p, rank) + allgather_sends(count, p, rank);
  EXPECT_EQ(counts.bytes_sent, elements * static_cast<std::int64_t>(sizeof(T)))
      << what << ": all but one chunk per half";
  std::int64_t all = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&counts.bytes_sent, &all, 1, MPI_INT64_T, MPI_SUM, on));
  EXPECT_EQ(all, 2 * (p - 1) * static_cast<std::int64_t>(count * sizeof(T)))
      << what << ": all ranks together send 2(P-1) n bytes, the lower bound";
}

TEST(HiddenRing, AllreduceOnOtherCountsTagsAndCommunicators) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 1;
    std::vector<std::size_t> counts = hidden_counts(on.size());
    counts.push_back(262147);  // 1 MiB of floats, far past every eager limit
    for (std::size_t count : counts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        if (!keep_going_on(on)) return;
        with_type(count == 262147 ? 0 : k++, [&](auto type) {
          check_allreduce<typename decltype(type)::type>(on, where, op, count, 0);
        });
      }
    }
  });
}

// Ones averaged over P ranks are 1 exactly when the sum is divided once (integers
// divided term by term give 0); 0.1 summed P times, then divided once, tells the two
// apart for floats wherever P is not a power of two (6, 7 and the halves, 3).
TEST(HiddenRing, AverageDividesOnceAtTheEnd) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    const int p = on.size();
    for (std::size_t count : {std::size_t{1}, std::size_t(p + 1), std::size_t{4 * 1024 + 3}}) {
      if (!keep_going_on(on)) return;
      const std::string what = "average, count " + std::to_string(count) + ", on " + where;
      std::vector<std::int32_t> ints(count, 1), rs_ints(count, 1);
      lab03::allreduce_ring<std::int32_t>(on, ints, ReduceOp::kAvg, 32767);
      EXPECT_TRUE(buffers_equal(std::vector<std::int32_t>(count, 1), ints, "allreduce_ring int32 " + what));
      lab03::reduce_scatter_ring<std::int32_t>(on, rs_ints, ReduceOp::kAvg, 32767);
      const std::size_t n = chunk_count(count, p, on.rank());
      const auto begin = rs_ints.begin() + static_cast<std::ptrdiff_t>(chunk_begin(count, p, on.rank()));
      EXPECT_TRUE(buffers_equal(std::vector<std::int32_t>(n, 1), std::vector<std::int32_t>(begin, begin + n),
                                "own chunk of reduce_scatter_ring int32 " + what));
      std::vector<float> floats(count, 0.1f);
      lab03::allreduce_ring<float>(on, floats, ReduceOp::kAvg, 32767);
      float sum = 0.0f;
      for (int r = 0; r < p; ++r) sum += 0.1f;
      EXPECT_TRUE(buffers_equal(std::vector<float>(count, sum / static_cast<float>(p)), floats,
                                "allreduce_ring float average of 0.1 (" + what + ")"));
    }
  });
}

// The two halves called one after the other, each with its own tag, equal one
// allreduce; and three rounds back to back on one tag do not mix.
TEST(HiddenRing, HalvesWithTheirOwnTagsAndBackToBack) {
  const int rank = comm().rank(), p = comm().size();
  for (int round = 0; round < 3; ++round) {
    if (!keep_going()) return;
    const std::size_t count = 10007 + static_cast<std::size_t>(round) * p;
    const std::vector<std::int32_t> mine = values<std::int32_t>(count, 7 * rank + round);
    const auto expected = vendor_allreduce_on(comm(), mine, ReduceOp::kSum);
    std::vector<std::int32_t> halves = mine, whole = mine;
    lab03::reduce_scatter_ring<std::int32_t>(comm(), halves, ReduceOp::kSum, 100 + round);
    lab03::allgather_ring<std::int32_t>(comm(), halves, 200 + round);
    lab03::allreduce_ring<std::int32_t>(comm(), whole, ReduceOp::kSum, 300);
    EXPECT_TRUE(buffers_equal(expected, halves, "reduce_scatter_ring (tag " + std::to_string(100 + round) +
                                                    ") then allgather_ring (tag " + std::to_string(200 + round) +
                                                    "), round " + std::to_string(round)));
    EXPECT_TRUE(buffers_equal(expected, whole, "allreduce_ring, tag 300, round " + std::to_string(round)));
  }
}

TEST(HiddenRing, RejectsBadArguments) {
  std::vector<double> buf(9, 1.0);
  for (int tag : {-2, 40000}) {
    EXPECT_THROW(lab03::reduce_scatter_ring<double>(comm(), buf, ReduceOp::kAvg, tag), dtl::InvalidArgument) << "tag " << tag;
    EXPECT_THROW(lab03::allgather_ring<double>(comm(), buf, tag), dtl::InvalidArgument) << "tag " << tag;
    EXPECT_THROW(lab03::allreduce_ring<double>(comm(), buf, ReduceOp::kAvg, tag), dtl::InvalidArgument) << "tag " << tag;
  }
}

// ---------------------------------------------------------------------------
// Task C: the segmented ring
// ---------------------------------------------------------------------------

// Messages `rank` of `p` sends: one per segment of every chunk it sends.
std::int64_t segmented_messages(std::size_t count, int p, int rank, std::size_t segment) {
  if (count == 0 || p == 1) return 0;
  std::int64_t messages = 0;
  for (int c = 0; c < p; ++c) {
    const auto segments = static_cast<std::int64_t>(lab03::segments_of(chunk_count(count, p, c), segment));
    if (c != rank) messages += segments;
    if (c != (rank + 1) % p) messages += segments;
  }
  return messages;
}

template <typename T>
void check_segmented(const dtl::Comm& on, const std::string& where, ReduceOp op, std::size_t count, std::size_t segment,
                     int tag) {
  const int rank = on.rank(), p = on.size();
  const std::string what = describe("allreduce_ring_segmented", type_name<T>(), op, count, tag, on, where) +
                           ", segment " + std::to_string(segment);
  const std::vector<T> mine = values<T>(count, 5 * rank + 2);
  std::vector<T> buf = mine;
  const auto counts =
      run_checked(on, tag, what, [&] { lab03::allreduce_ring_segmented<T>(on, buf, op, tag, segment); });
  EXPECT_TRUE(only_nonblocking(counts, what));
  EXPECT_TRUE(buffers_equal(vendor_allreduce_on(on, mine, op), buf, "buf (" + what + ")"));
  EXPECT_EQ(counts.messages_sent, segmented_messages(count, p, rank, segment))
      << what << ": one message per segment of every chunk sent";
  const std::int64_t elements = p == 1 ? 0 : reduce_scatter_sends(count, p, rank) + allgather_sends(count, p, rank);
  EXPECT_EQ(counts.bytes_sent, elements * static_cast<std::int64_t>(sizeof(T)))
      << what << ": segmenting changes the messages, not the bytes";
}

TEST(HiddenSegmented, OtherCountsSegmentsTagsAndCommunicators) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 0;
    for (std::size_t count : hidden_counts(on.size())) {
      const std::size_t chunk = chunk_count(count, on.size(), 0);
      for (std::size_t segment : {std::size_t{2}, std::size_t{33}, std::size_t{1000}, chunk + 1}) {
        // Tiny segments of a large buffer mean 10^4 requests in flight: slow, and they prove nothing more.
        if (segment * 1000 < chunk) continue;
        if (!keep_going_on(on)) return;
        const ReduceOp op = k % 2 ? ReduceOp::kAvg : ReduceOp::kSum;
        with_type(k / 2 + k, [&](auto type) {
          check_segmented<typename decltype(type)::type>(on, where, op, count, segment, 4321);
        });
        ++k;
      }
    }
  });
}

TEST(HiddenSegmented, RejectsBadArguments) {
  std::vector<std::int32_t> buf(9, 1);
  EXPECT_THROW(lab03::allreduce_ring_segmented<std::int32_t>(comm(), buf, ReduceOp::kAvg, 8, 0), dtl::InvalidArgument)
      << "segment_elements 0";
  EXPECT_THROW(lab03::allreduce_ring_segmented<std::int32_t>(comm(), buf, ReduceOp::kSum, 32768, 4), dtl::InvalidArgument)
      << "tag 32768";
}

}  // namespace
