// Hidden tests for lab 02. Every property the public tests check is checked again
// here, on inputs the public tests never use, so that code tuned to the public
// tests fails:
//
//   - the result, against the vendor's collective (MPI_Bcast, MPI_Scatter, ...) on the
//     same communicator, called after the tracer's counts of the code under test;
//   - no vendor collective; every message with the tag argument; no wildcard
//     receive; and two empty messages with other tags from each neighbour in flight
//     during the call, which must still be waiting afterwards;
//   - each algorithm's shape from the tracer: a binomial tree (every non-root
//     receives once, no rank sends more than ceil(log2 P) messages, the root exactly
//     that many; a linear broadcast's root sends P - 1), scatter + allgather's bytes
//     at the root, the ring's and pairwise exchange's P - 1 messages, recursive
//     doubling's log2 P;
//   - at 6 and 7 ranks, every root, counts 0, 1, fewer than the ranks, divisible by
//     them, not divisible, and large, tags 0, 1, 777, 12345 and 32767, full-size
//     buffers on ranks where they are ignored, broadcast()'s default switch size,
//     and communicators whose ranks are not MPI_COMM_WORLD's (the world reversed,
//     two halves, a group of four): code that talks on MPI_COMM_WORLD or uses world
//     ranks gets the wrong data or hangs there.
//
// Every rank makes the same calls in the same order: no ASSERT_, and a sweep stops
// on all ranks of its communicator together after the first failing case.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "labs/02_collectives/tests/collective_test_util.h"

namespace {

using namespace lab02_test;  // comm(), values(), traced(), no_vendor_collective(), only_tag(), receives(), ...
using dtl::testing::buffers_equal;
namespace lab = dtl::lab02;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// ---------------------------------------------------------------------------
// Communicators, cases, decoys
// ---------------------------------------------------------------------------

// split_comm(), on_each_communicator(), keep_going_on(), with_type(), Decoys and
// run_checked() are harness/testing/collective_checks.h's.

std::int64_t sum_on(const dtl::Comm& on, std::int64_t mine) {
  std::int64_t sum = 0;
  DTL_MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, on));
  return sum;
}

// Counts a public test never sweeps at 6 or 7 ranks (and the smaller ones of the halves).
std::vector<std::size_t> hidden_counts(int p) {
  const auto n = static_cast<std::size_t>(p);
  return {0, 1, n > 2 ? n - 2 : 1, 2 * n, 3 * n + 1, 65539};
}

std::string describe(const std::string& function, const std::string& type, int root, std::size_t count, int tag,
                     const dtl::Comm& on, const std::string& where) {
  return function + ", " + case_name(type, root, count) + ", tag " + std::to_string(tag) + ", on " + where +
         " (rank " + std::to_string(on.rank()) + " of " + std::to_string(on.size()) + ")";
}

// A binomial tree's shape: `edge` (what each non-root does exactly once) and `fan`
// (what a rank does at most once per round, the root exactly once per round).
void expect_tree(std::int64_t edge, std::int64_t fan, const dtl::Comm& on, int root, const std::string& what) {
  const int rounds = ceil_log2(on.size());
  if (on.rank() != root) {
    EXPECT_EQ(edge, 1) << what << ": in a tree every rank but the root has exactly one parent";
  }
  EXPECT_LE(fan, rounds) << what << ": a binomial tree has ceil(log2 P) = " << rounds << " rounds, one message each";
  if (on.rank() == root) {
    EXPECT_EQ(fan, rounds) << what << ": the root exchanges one message per round of the tree, not one per rank";
  }
}

// ---------------------------------------------------------------------------
// Task A: broadcast
// ---------------------------------------------------------------------------

enum class Bcast { kBinomial, kScatterAllgather };

template <typename T>
void check_broadcast(const dtl::Comm& on, const std::string& where, Bcast algo, int root, std::size_t count, int tag) {
  const int rank = on.rank(), p = on.size();
  const std::string name = algo == Bcast::kBinomial ? "broadcast_binomial" : "broadcast_scatter_allgather";
  const std::string what = describe(name, type_name<T>(), root, count, tag, on, where);
  const auto start = [&] { return rank == root ? values<T>(count, root + 40) : std::vector<T>(count, T{-1}); };
  std::vector<T> buf = start();
  const auto counts = run_checked(on, tag, what, [&] {
    if (algo == Bcast::kBinomial) lab::broadcast_binomial<T>(on, buf, root, tag);
    else lab::broadcast_scatter_allgather<T>(on, buf, root, tag);
  });
  std::vector<T> expected = start();
  DTL_MPI_CHECK(MPI_Bcast(expected.data(), static_cast<int>(count), dtl::mpi_datatype<T>(), root, on));
  EXPECT_TRUE(buffers_equal(expected, buf, "buf (" + what + ")"));
  if (count == 0) return;
  const auto bytes = static_cast<std::int64_t>(count * sizeof(T));
  if (algo == Bcast::kBinomial) {
    expect_tree(receives(counts), counts.messages_sent, on, root, what);
    EXPECT_EQ(counts.bytes_sent, counts.messages_sent * bytes) << what << ": every tree message is the whole buffer";
    EXPECT_EQ(sum_on(on, counts.messages_sent), p - 1) << what << ": a tree on P ranks has P - 1 edges";
  } else {
    EXPECT_LE(counts.messages_sent, ceil_log2(p) + p - 1)
        << what << ": at most ceil(log2 P) scatter messages and P - 1 ring steps";
    if (rank == root) {
      const auto limit = static_cast<std::int64_t>(2 * (count - count / p) * sizeof(T));
      EXPECT_LE(counts.bytes_sent, limit) << what << ": the root sends each chunk about twice, at most " << limit
                                          << " bytes, not the tree's ceil(log2 P) times the buffer";
    }
  }
}

void sweep_broadcast(Bcast algo) {
  on_each_communicator([&](const dtl::Comm& on, const std::string& where) {
    // Every root on the test's communicator; the last and the second on the others.
    std::vector<int> roots;
    for (int r = on.size() - 1; r >= 0; --r) {
      if (&on == &comm() || r == on.size() - 1 || r == 1) roots.push_back(r);
    }
    std::size_t k = 0;
    for (int root : roots) {
      for (std::size_t count : hidden_counts(on.size())) {
        if (!keep_going_on(on)) return;
        with_type(k++, [&](auto type) {
          check_broadcast<typename decltype(type)::type>(on, where, algo, root, count, 32767);
        });
      }
    }
  });
}

TEST(HiddenBroadcast, BinomialTreeOtherRootsCountsAndCommunicators) { sweep_broadcast(Bcast::kBinomial); }

TEST(HiddenBroadcast, ScatterAllgatherOtherRootsCountsAndCommunicators) { sweep_broadcast(Bcast::kScatterAllgather); }

// broadcast() with the default switch size, just below and at it (doubles), and with
// a switch of one double, from 3 ranks up: the tree below, scatter + allgather from it.
TEST(HiddenBroadcast, SwitchesAtTheDefaultSizeAndOthers) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    const int rank = on.rank(), p = on.size(), root = 1, tag = 0;
    const std::size_t below = lab::kBroadcastSwitchBytes / sizeof(double) - 1;
    for (const auto& [count, switch_bytes] : {std::pair{below, lab::kBroadcastSwitchBytes},
                                              std::pair{below + 1, lab::kBroadcastSwitchBytes},
                                              std::pair{std::size_t{3}, sizeof(double)}}) {
      if (!keep_going_on(on)) return;
      const bool tree = p < 3 || count * sizeof(double) < switch_bytes;
      const std::string what = describe("broadcast with switch_bytes " + std::to_string(switch_bytes), "double", root,
                                        count, tag, on, where) + (tree ? ": the tree" : ": scatter + allgather");
      std::vector<double> buf = rank == root ? values<double>(count, 21) : std::vector<double>(count, -1.0);
      const auto counts = run_checked(on, tag, what, [&] { lab::broadcast<double>(on, buf, root, tag, switch_bytes); });
      EXPECT_TRUE(buffers_equal(values<double>(count, 21), buf, "buf (" + what + ")"));
      const auto tree_bytes = static_cast<std::int64_t>(ceil_log2(p) * count * sizeof(double));
      if (tree) {
        expect_tree(receives(counts), counts.messages_sent, on, root, what);
      } else if (rank == root) {
        EXPECT_LT(counts.bytes_sent, tree_bytes) << what << ": the root sent as much as the binomial tree would";
      }
    }
  });
}

TEST(HiddenBroadcast, RejectsBadArguments) {
  const int size = comm().size();
  std::vector<double> buf(5);
  using dtl::InvalidArgument;
  for (auto bcast : {&lab::broadcast_binomial<double>, &lab::broadcast_scatter_allgather<double>}) {
    EXPECT_THAT([&] { bcast(comm(), buf, size + 1, 0); },
                ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("'root'"), HasSubstr("rank "))));
    EXPECT_THAT([&] { bcast(comm(), buf, 0, 40000); }, ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  }
  EXPECT_THAT([&] { lab::broadcast<double>(comm(), buf, -3, 0, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'root'")));
}

// ---------------------------------------------------------------------------
// Task B: scatter and gather
// ---------------------------------------------------------------------------

// Every rank passes full-size buffers, also where they are ignored: a non-root's
// send_buf of scatter must not be read, its recv_buf of gather not written.
template <typename T>
void check_scatter_gather(const dtl::Comm& on, const std::string& where, int root, std::size_t count, int tag) {
  const int rank = on.rank(), p = on.size();
  const auto n = static_cast<int>(count);
  const std::string what_s = describe("scatter", type_name<T>(), root, count, tag, on, where);
  const auto all = values<T>(p * count, rank == root ? 5 : 100 + rank);
  std::vector<T> block(count, T{-1});
  auto counts = run_checked(on, tag, what_s, [&] { lab::scatter<T>(on, all, block, root, tag); });
  std::vector<T> expected_block(count, T{-1});
  DTL_MPI_CHECK(MPI_Scatter(all.data(), n, dtl::mpi_datatype<T>(), expected_block.data(), n, dtl::mpi_datatype<T>(),
                            root, on));
  EXPECT_TRUE(buffers_equal(expected_block, block, "recv_buf (" + what_s + ")"));
  if (count > 0) {
    expect_tree(receives(counts), counts.messages_sent, on, root, what_s);
    if (rank == root) {
      EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((p - 1) * count * sizeof(T)))
          << what_s << ": every block but the root's own leaves the root once";
    }
  }

  const std::string what_g = describe("gather", type_name<T>(), root, count, tag, on, where);
  const auto mine = values<T>(count, 7 * rank + 1);
  std::vector<T> gathered(p * count, T{-1}), expected(p * count, T{-1});
  counts = run_checked(on, tag, what_g, [&] { lab::gather<T>(on, mine, gathered, root, tag); });
  DTL_MPI_CHECK(MPI_Gather(mine.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(), root,
                           on));
  EXPECT_TRUE(buffers_equal(expected, gathered, "recv_buf (" + what_g + ")"));
  if (count > 0) expect_tree(counts.messages_sent, receives(counts), on, root, what_g);
}

TEST(HiddenScatterGather, BinomialTreesWithFullSizeBuffersEverywhere) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 0;
    for (int root = on.size() - 1; root >= 0; root -= 2) {
      for (std::size_t count : hidden_counts(on.size())) {
        if (!keep_going_on(on)) return;
        with_type(k++, [&](auto type) {
          check_scatter_gather<typename decltype(type)::type>(on, where, root, count, 1);
        });
      }
    }
  });
}

TEST(HiddenScatterGather, RejectsBadArguments) {
  const int size = comm().size();
  const std::vector<std::int32_t> short_send(size * 3 - 1);  // wrong on every rank: neither empty nor P blocks
  std::vector<std::int32_t> block(3), short_recv(size * 3 - 1);
  EXPECT_THAT([&] { lab::scatter<std::int32_t>(comm(), short_send, block, 0, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'send_buf'")));
  EXPECT_THAT([&] { lab::gather<std::int32_t>(comm(), block, short_recv, size - 1, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { lab::gather<std::int32_t>(comm(), block, block, -2, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'root'")));
}

// ---------------------------------------------------------------------------
// Task C: reduce
// ---------------------------------------------------------------------------

template <typename T>
void check_reduce(const dtl::Comm& on, const std::string& where, dtl::ReduceOp op, MPI_Op vendor_op, int root,
                  std::size_t count, int tag) {
  const int rank = on.rank();
  const char* op_name = op == dtl::ReduceOp::kSum ? "sum" : op == dtl::ReduceOp::kMax ? "max" : "min";
  const std::string what = describe(std::string("reduce ") + op_name, type_name<T>(), root, count, tag, on, where);
  const auto send = values<T>(count, 3 * rank + 2);
  std::vector<T> recv(count, T{-1}), expected(count, T{-1});  // full size on every rank: only the root's is written
  const auto counts = run_checked(on, tag, what, [&] { lab::reduce<T>(on, send, recv, op, root, tag); });
  DTL_MPI_CHECK(MPI_Reduce(send.data(), expected.data(), static_cast<int>(count), dtl::mpi_datatype<T>(), vendor_op,
                           root, on));
  EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
  if (count == 0) return;
  expect_tree(counts.messages_sent, receives(counts), on, root, what);
  if (rank == root) {
    EXPECT_EQ(counts.messages_sent, 0) << what << ": the root sends nothing";
  }
  EXPECT_EQ(counts.bytes_sent, counts.messages_sent * static_cast<std::int64_t>(count * sizeof(T)))
      << what << ": a partial result is the whole vector, in one message";
}

TEST(HiddenReduce, EveryOpOtherRootsCountsAndCommunicators) {
  const std::pair<dtl::ReduceOp, MPI_Op> ops[] = {
      {dtl::ReduceOp::kMax, MPI_MAX}, {dtl::ReduceOp::kSum, MPI_SUM}, {dtl::ReduceOp::kMin, MPI_MIN}};
  on_each_communicator([&](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 0;
    for (int root = 0; root < on.size(); root += 2) {
      for (std::size_t count : hidden_counts(on.size())) {
        if (!keep_going_on(on)) return;
        const auto& [op, vendor_op] = ops[k % 3];
        with_type(k / 3 + k, [&](auto type) {
          check_reduce<typename decltype(type)::type>(on, where, op, vendor_op, root, count, 0);
        });
        ++k;
      }
    }
  });
}

TEST(HiddenReduce, RejectsBadArguments) {
  const std::vector<float> send(6);
  std::vector<float> recv(6), shorter(5);  // shorter is wrong on every rank: neither empty nor 6
  EXPECT_THAT([&] { lab::reduce<float>(comm(), send, shorter, dtl::ReduceOp::kSum, 0, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { lab::reduce<float>(comm(), send, recv, static_cast<dtl::ReduceOp>(-1), 0, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'op'")));
  EXPECT_THAT([&] { lab::reduce<float>(comm(), send, recv, dtl::ReduceOp::kMin, 0, 32768); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'tag'")));
}

// ---------------------------------------------------------------------------
// Task D: allgather; task E: alltoall
// ---------------------------------------------------------------------------

enum class Allgather { kRing, kRecursiveDoubling };

template <typename T>
void check_allgather(const dtl::Comm& on, const std::string& where, Allgather algo, std::size_t count, int tag) {
  const int p = on.size();
  const auto n = static_cast<int>(count);
  const bool ring = algo == Allgather::kRing;
  const std::string what =
      describe(ring ? "allgather_ring" : "allgather_recursive_doubling", type_name<T>(), -1, count, tag, on, where);
  const auto send = values<T>(count, on.rank() + 9);
  std::vector<T> recv(p * count, T{-1}), expected(p * count, T{-1});
  const auto counts = run_checked(on, tag, what, [&] {
    if (ring) lab::allgather_ring<T>(on, send, recv, tag);
    else lab::allgather_recursive_doubling<T>(on, send, recv, tag);
  });
  DTL_MPI_CHECK(MPI_Allgather(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(), on));
  EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
  if (count == 0) return;
  EXPECT_EQ(counts.messages_sent, ring ? p - 1 : ceil_log2(p)) << what << ": messages sent";
  EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((p - 1) * count * sizeof(T)))
      << what << ": every rank sends P - 1 blocks in all";
}

TEST(HiddenAllgather, RingOtherCountsAndCommunicators) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 0;
    for (std::size_t count : hidden_counts(on.size())) {
      if (!keep_going_on(on)) return;
      with_type(k++, [&](auto type) {
        check_allgather<typename decltype(type)::type>(on, where, Allgather::kRing, count, 12345);
      });
    }
  });
}

// The first four world ranks, numbered backwards, form a power of two; the rest (2
// or 3 ranks) and the whole world (6 or 7) do not, and there the call must refuse.
TEST(HiddenAllgather, RecursiveDoublingOnPowerOfTwoGroupsOnly) {
  const int rank = comm().rank();
  const dtl::Comm group = split_comm(rank < 4 ? 0 : 1, -rank);
  for (const dtl::Comm* on : {&group, &comm()}) {
    const int p = on->size();
    const std::string where = on == &comm() ? "the test's communicator" : "a group of " + std::to_string(p);
    if ((p & (p - 1)) != 0) {
      const std::vector<float> send(3);
      std::vector<float> recv(3 * p);
      EXPECT_THAT([&] { lab::allgather_recursive_doubling<float>(*on, send, recv, 0); },
                  ThrowsMessage<dtl::InvalidArgument>(AllOf(HasSubstr("'comm'"), HasSubstr("power of two"))))
          << "allgather_recursive_doubling on " << where << ", " << p << " ranks, must refuse";
      continue;
    }
    std::size_t k = 0;
    for (std::size_t count : hidden_counts(p)) {
      if (!keep_going_on(*on)) break;
      with_type(k++, [&](auto type) {
        check_allgather<typename decltype(type)::type>(*on, where, Allgather::kRecursiveDoubling, count, 12345);
      });
    }
  }
}

template <typename T>
void check_alltoall(const dtl::Comm& on, const std::string& where, std::size_t count, int tag) {
  const int p = on.size();
  const auto n = static_cast<int>(count);
  const std::string what = describe("alltoall_pairwise", type_name<T>(), -1, count, tag, on, where);
  const auto send = values<T>(p * count, 7 * on.rank() + 2);
  std::vector<T> recv(p * count, T{-1}), expected(p * count, T{-1});
  const auto counts = run_checked(on, tag, what, [&] { lab::alltoall_pairwise<T>(on, send, recv, tag); });
  DTL_MPI_CHECK(MPI_Alltoall(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(), on));
  EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
  if (count == 0) return;
  EXPECT_EQ(counts.messages_sent, p - 1) << what << ": one block to each other rank; the own block is copied";
  EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((p - 1) * count * sizeof(T))) << what << ": bytes sent";
  EXPECT_EQ(receives(counts), p - 1) << what << ": one receive per other rank";
}

TEST(HiddenAlltoall, PairwiseOtherCountsAndCommunicators) {
  on_each_communicator([](const dtl::Comm& on, const std::string& where) {
    std::size_t k = 1;
    for (std::size_t count : hidden_counts(on.size())) {
      if (!keep_going_on(on)) return;
      with_type(k++, [&](auto type) { check_alltoall<typename decltype(type)::type>(on, where, count, 777); });
    }
  });
}

TEST(HiddenAllgather, RejectsBadArguments) {
  const std::vector<double> send(2);
  std::vector<double> longer(2 * comm().size() + 2);
  EXPECT_THAT([&] { lab::allgather_ring<double>(comm(), send, longer, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
}

TEST(HiddenAlltoall, RejectsBadArguments) {
  const int size = comm().size();
  const std::vector<double> send(2 * size), uneven(2 * size + 1);
  std::vector<double> recv(2 * size), longer(2 * size + 2);
  EXPECT_THAT([&] { lab::alltoall_pairwise<double>(comm(), uneven, longer, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'send_buf'")));
  EXPECT_THAT([&] { lab::alltoall_pairwise<double>(comm(), send, longer, 0); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { lab::alltoall_pairwise<double>(comm(), send, recv, -4); },
              ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'tag'")));
}

}  // namespace
