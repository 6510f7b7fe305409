// Hidden tests for lab 01. Every property the public tests check is checked
// again here, on inputs the public tests never use, so that code tuned to the
// public tests' tags, sizes, pairs or communicator fails:
//
//   - the data, against closed forms of the byte pattern (never the code under test);
//   - one message per shift (per iteration, per neighbour) carrying the tag argument,
//     and receives that name their peer and tag: messages with other tags, and with
//     the same tag from another rank, are in flight during the call and must still
//     be waiting, untouched, afterwards;
//   - the halo exchange's nonblocking calls, and the argument checks;
//   - at 5 and 6 ranks, with other tags (1, 321, 7777, 32767, ...), odd and large
//     sizes, other pairs of ranks, uneven pieces, and communicators whose ranks are
//     not MPI_COMM_WORLD's (the world reversed, and two halves): code that talks on
//     MPI_COMM_WORLD or uses world ranks gets the wrong data or hangs there.
//
// Every rank makes the same calls in the same order: no ASSERT_, and a sweep stops
// on all ranks together (keep_going()) after the first failing case.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/testing/collective_checks.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::keep_going;
using dtl::testing::pattern_bytes;
using dtl::testing::traced;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Bytes = std::vector<std::byte>;

// ---------------------------------------------------------------------------
// Communicators, and messages that must be left alone
// ---------------------------------------------------------------------------

// A communicator made from comm() by MPI_Comm_split (collective), owned.
dtl::Comm split(int color, int key) {
  MPI_Comm raw = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(comm(), color, key, &raw));
  dtl::Comm owned(raw);
  MPI_Comm_free(&raw);
  return owned;
}

// All ranks, numbered backwards: rank r of the world is rank P-1-r here.
dtl::Comm reversed() { return split(0, comm().size() - 1 - comm().rank()); }

// Two rings of their own: the even and the odd world ranks.
dtl::Comm half() { return split(comm().rank() % 2, comm().rank()); }

std::string on_rank(const dtl::Comm& on) {
  return " [rank " + std::to_string(on.rank()) + " of " + std::to_string(on.size()) + " on this communicator]";
}

// The contents of the decoy that `sender` sends with `tag`: differs by both.
Bytes decoy_bytes(std::size_t bytes, int sender, int tag) { return pattern_bytes(bytes, 700 + 11 * sender + tag % 89); }

// Sends a decoy (nonblocking; the request goes into `requests`).
void send_decoy(const dtl::Comm& on, std::vector<Bytes>& keep, std::vector<MPI_Request>& requests, int dest, int tag,
                std::size_t bytes) {
  keep.push_back(decoy_bytes(bytes, on.rank(), tag));
  requests.emplace_back();
  DTL_MPI_CHECK(MPI_Isend(keep.back().data(), static_cast<int>(bytes), MPI_BYTE, dest, tag, on, &requests.back()));
}

// After the call: the decoy from `source` with `tag` must still be waiting, as it was
// sent. Polls (MPI_Iprobe) for a second instead of blocking, so a swallowed decoy is
// a failure, not a hang; receives whatever matches, at its real size.
::testing::AssertionResult decoy_waiting(const dtl::Comm& on, int source, int tag, std::size_t bytes) {
  const double deadline = MPI_Wtime() + 1.0;
  int found = 0;
  MPI_Status status;
  while (!found && MPI_Wtime() < deadline) DTL_MPI_CHECK(MPI_Iprobe(source, tag, on, &found, &status));
  const std::string what = "the message from rank " + std::to_string(source) + " with tag " + std::to_string(tag) +
                           ", sent before the call" + on_rank(on);
  if (!found) {
    return ::testing::AssertionFailure() << what << " was not waiting after the call: the code under test received "
                                         << "it. Receive from the peer's rank with the tag argument, never "
                                         << "MPI_ANY_SOURCE or MPI_ANY_TAG or a tag of your own.";
  }
  int got_bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &got_bytes);
  Bytes got(static_cast<std::size_t>(got_bytes));
  DTL_MPI_CHECK(MPI_Recv(got.data(), got_bytes, MPI_BYTE, source, tag, on, MPI_STATUS_IGNORE));
  return buffers_equal(decoy_bytes(bytes, source, tag), got, what);
}

// The tracer's counts of one call: `messages` sends of `bytes_each`, all with `tag`,
// and no wildcard receive.
void expect_messages(const dtl::trace::Counts& counts, std::int64_t messages, std::int64_t bytes_each, int tag,
                     const std::string& what) {
  EXPECT_EQ(counts.messages_sent, messages) << what << ": number of messages sent";
  EXPECT_EQ(counts.bytes_sent, messages * bytes_each) << what << ": bytes sent";
  const std::map<int, std::int64_t> only_tag = messages > 0 ? std::map<int, std::int64_t>{{tag, messages}}
                                                            : std::map<int, std::int64_t>{};
  EXPECT_EQ(counts.sends_by_tag, only_tag) << what << ": every message must carry the tag argument, " << tag;
  EXPECT_EQ(counts.any_source_receives + counts.any_tag_receives, 0)
      << what << ": receive from the peer with the tag, not MPI_ANY_SOURCE/MPI_ANY_TAG";
}

// ---------------------------------------------------------------------------
// Task B: the ring
// ---------------------------------------------------------------------------

int seed_of(int rank) { return 3 * rank + 1; }

void check_shift(const dtl::Comm& on, std::size_t bytes, int tag) {
  const int rank = on.rank();
  const int left = (rank - 1 + on.size()) % on.size();
  const std::string what =
      "ring_shift of " + std::to_string(bytes) + " B with tag " + std::to_string(tag) + on_rank(on);
  const Bytes send = pattern_bytes(bytes, seed_of(rank));
  Bytes recv(bytes, std::byte{0xEE});
  const auto counts = traced([&] { dtl::lab01::ring_shift(on, send, recv, tag); });
  EXPECT_TRUE(buffers_equal(pattern_bytes(bytes, seed_of(left)), recv,
                            "recv_buf (" + what + ", from rank " + std::to_string(left) + ")"));
  expect_messages(counts, 1, static_cast<std::int64_t>(bytes), tag, what);
}

// Messages with tag 0, with a neighbouring tag, and with the ring's own tag from two
// ranks to the left are in flight when ring_shift starts; all must stay where they are.
TEST(HiddenRing, OtherTagsWithDecoysInFlight) {
  const dtl::Comm& on = comm();
  const int rank = on.rank();
  const int size = on.size();
  const std::size_t bytes = 1000;  // below the eager limit: code that takes a decoy returns, and is named
  for (const auto& [tag, other] : {std::pair{321, 320}, std::pair{1, 2}, std::pair{32767, 32766}}) {
    if (!keep_going()) return;
    std::vector<Bytes> keep;
    std::vector<MPI_Request> requests;
    keep.reserve(3);
    send_decoy(on, keep, requests, (rank + 1) % size, 0, bytes);
    send_decoy(on, keep, requests, (rank + 1) % size, other, bytes);
    send_decoy(on, keep, requests, (rank + 2) % size, tag, bytes);
    check_shift(on, bytes, tag);
    const int left = (rank - 1 + size) % size;
    EXPECT_TRUE(decoy_waiting(on, left, 0, bytes));
    EXPECT_TRUE(decoy_waiting(on, left, other, bytes));
    EXPECT_TRUE(decoy_waiting(on, (rank - 2 + size) % size, tag, bytes));
    DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  }
}

// Odd sizes on both sides of the eager limit, and a large one far above it.
TEST(HiddenRing, OddSizesWithoutDeadlock) {
  for (std::size_t bytes : {0, 2, 4095, 4097, 12289, (3 << 20) + 5}) {
    if (!keep_going()) return;
    check_shift(comm(), bytes, 7777);
  }
}

// Ranks that are not MPI_COMM_WORLD's; and P shifts with one tag bring the data home.
TEST(HiddenRing, OnCommunicatorsOtherThanTheWorld) {
  for (const dtl::Comm& on : {reversed(), half()}) {
    for (std::size_t bytes : {5, 70001}) {
      if (!keep_going()) return;
      check_shift(on, bytes, 12);
    }
  }
  const dtl::Comm on = reversed();
  Bytes data = pattern_bytes(9001, seed_of(on.rank()));
  Bytes next(data.size());
  for (int step = 0; step < on.size(); ++step) {
    dtl::lab01::ring_shift(on, data, next, 4242);
    std::swap(data, next);
  }
  EXPECT_TRUE(buffers_equal(pattern_bytes(9001, seed_of(on.rank())), data,
                            "data after " + std::to_string(on.size()) + " shifts with one tag" + on_rank(on)));
}

TEST(HiddenRing, RejectsBadArguments) {
  Bytes send(8), recv(8), longer(9);
  using dtl::InvalidArgument;
  EXPECT_THAT([&] { dtl::lab01::ring_shift(comm(), send, longer, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
  EXPECT_THAT([&] { dtl::lab01::ring_shift(comm(), send, recv, 32768); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
}

// ---------------------------------------------------------------------------
// Task A: ping-pong
// ---------------------------------------------------------------------------

// One ping-pong on `on`: both ends hold the initiator's message, each sent exactly
// `iterations` messages with `tag`; the other ranks sent nothing and kept recv_buf;
// only the initiator returns a time, which fits in the call's own duration.
void check_pair(const dtl::Comm& on, int initiator, int responder, std::size_t bytes, int iterations, int tag) {
  const int rank = on.rank();
  const std::string what = "ping_pong " + std::to_string(initiator) + " <-> " + std::to_string(responder) + ", " +
                           std::to_string(bytes) + " B, tag " + std::to_string(tag) + on_rank(on);
  const Bytes message = pattern_bytes(bytes, 1000 + initiator);
  const Bytes send = rank == initiator ? message : pattern_bytes(bytes, rank);  // only the initiator's is read
  Bytes recv(bytes, std::byte{0xEE});
  double seconds = 0.0;
  const double start = MPI_Wtime();
  const auto counts = traced([&] {
    seconds = dtl::lab01::ping_pong(on, send, recv, initiator, responder, iterations, tag);
  });
  const double elapsed = MPI_Wtime() - start;
  if (rank == initiator || rank == responder) {
    EXPECT_TRUE(buffers_equal(message, recv, "recv_buf (" + what + ")"));
    expect_messages(counts, iterations, static_cast<std::int64_t>(bytes), tag, what);
  } else {
    EXPECT_TRUE(buffers_equal(Bytes(bytes, std::byte{0xEE}), recv, "recv_buf outside the pair (" + what + ")"));
    EXPECT_EQ(counts.messages_sent, 0) << what << ": a rank outside the pair sends nothing";
  }
  if (rank == initiator) {
    EXPECT_TRUE(std::isfinite(seconds) && seconds > 0.0 && seconds * iterations <= elapsed * 1.001 + 1e-7)
        << what << ": returned " << seconds << " s per round trip for " << iterations << " round trips in "
        << elapsed << " s";
  } else {
    EXPECT_EQ(seconds, 0.0) << what << ": only the initiator returns a time";
  }
}

TEST(HiddenPingPong, OtherPairsTagsAndSizes) {
  const int last = comm().size() - 1;
  for (const auto& [initiator, responder, tag] : {std::tuple{last, 1, 32767}, std::tuple{2, 0, 4242},
                                                 std::tuple{1, last, 100}, std::tuple{last - 1, last, 1}}) {
    for (std::size_t bytes : {1, 9999, (2 << 20) + 1}) {
      if (!keep_going()) return;
      check_pair(comm(), initiator, responder, bytes, 3, tag);
    }
  }
}

// Before the call, the initiator sends the responder messages with tag 0 and tag + 1,
// the responder sends the initiator one with tag + 1, and a third rank sends both of
// them one with the ping-pong's own tag: a wildcard receive at either end takes one.
TEST(HiddenPingPong, DecoysOfOtherTagsAndSourcesStayPut) {
  const dtl::Comm& on = comm();
  const int rank = on.rank();
  const int initiator = on.size() - 1, responder = 2, third = 0;
  const std::size_t bytes = 512;
  const int tag = 555;
  std::vector<Bytes> keep;
  std::vector<MPI_Request> requests;
  keep.reserve(4);
  if (rank == initiator) {
    send_decoy(on, keep, requests, responder, 0, bytes);
    send_decoy(on, keep, requests, responder, tag + 1, bytes);
  } else if (rank == responder) {
    send_decoy(on, keep, requests, initiator, tag + 1, bytes);
  } else if (rank == third) {
    send_decoy(on, keep, requests, responder, tag, bytes);
    send_decoy(on, keep, requests, initiator, tag, bytes);
  }
  check_pair(on, initiator, responder, bytes, 4, tag);
  if (rank == responder) {
    EXPECT_TRUE(decoy_waiting(on, initiator, 0, bytes));
    EXPECT_TRUE(decoy_waiting(on, initiator, tag + 1, bytes));
    EXPECT_TRUE(decoy_waiting(on, third, tag, bytes));
  } else if (rank == initiator) {
    EXPECT_TRUE(decoy_waiting(on, responder, tag + 1, bytes));
    EXPECT_TRUE(decoy_waiting(on, third, tag, bytes));
  }
  DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

TEST(HiddenPingPong, OnCommunicatorsOtherThanTheWorld) {
  for (const dtl::Comm& on : {reversed(), half()}) {
    for (std::size_t bytes : {3, 50001}) {
      if (!keep_going()) return;
      check_pair(on, 0, on.size() - 1, bytes, 2, 9);
    }
  }
}

TEST(HiddenPingPong, RejectsBadArguments) {
  const int size = comm().size();
  Bytes send(8), recv(8), longer(9);
  using dtl::InvalidArgument;
  EXPECT_THAT([&] { dtl::lab01::ping_pong(comm(), send, recv, size, 0, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'initiator'")));
  EXPECT_THAT([&] { dtl::lab01::ping_pong(comm(), send, recv, 3, 3, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'responder'")));
  EXPECT_THAT([&] { dtl::lab01::ping_pong(comm(), send, recv, 1, 4, -2, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'iterations'")));
  EXPECT_THAT([&] { dtl::lab01::ping_pong(comm(), send, recv, 1, 4, 1, 32768); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
  EXPECT_THAT([&] { dtl::lab01::ping_pong(comm(), send, longer, 1, 4, 1, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'recv_buf'")));
}

// ---------------------------------------------------------------------------
// Task C: the halo exchange
// ---------------------------------------------------------------------------

constexpr double kUntouched = -1.0;

// Rank r of `on` owns `owned[r]` cells of a global grid whose cell g holds g.
// Returns what its field must hold after the exchange.
std::vector<double> expected_field(const std::vector<std::size_t>& owned, int r, std::size_t halo, bool periodic) {
  const int size = static_cast<int>(owned.size());
  std::vector<std::size_t> first(owned.size() + 1, 0);
  for (std::size_t i = 0; i < owned.size(); ++i) first[i + 1] = first[i] + owned[i];
  std::vector<double> field(owned[r] + 2 * halo, kUntouched);
  for (std::size_t i = 0; i < owned[r]; ++i) field[halo + i] = static_cast<double>(first[r] + i);
  const int left = (r - 1 + size) % size, right = (r + 1) % size;
  for (std::size_t i = 0; i < halo; ++i) {
    if (periodic || r > 0) field[i] = static_cast<double>(first[left] + owned[left] - halo + i);
    if (periodic || r < size - 1) field[halo + owned[r] + i] = static_cast<double>(first[right] + i);
  }
  return field;
}

void check_exchange(const dtl::Comm& on, const std::vector<std::size_t>& owned, std::size_t halo, bool periodic,
                    int tag) {
  const int rank = on.rank();
  const std::string what = "halo_exchange, halo " + std::to_string(halo) +
                           (periodic ? ", periodic" : ", not periodic") +
                           ", " + std::to_string(owned[rank]) + " owned cells, tag " + std::to_string(tag) +
                           on_rank(on);
  std::vector<double> field = expected_field(owned, rank, halo, periodic);
  for (std::size_t i = 0; i < halo; ++i) field[i] = field[field.size() - 1 - i] = kUntouched;
  const auto counts = traced([&] { dtl::lab01::halo_exchange(on, field, halo, periodic, tag); });
  EXPECT_TRUE(buffers_equal(expected_field(owned, rank, halo, periodic), field, "field (" + what + ")"));
  // One message to each neighbour (a non-periodic edge has one), all nonblocking.
  const int neighbours = halo == 0 ? 0 : (periodic || rank > 0) + (periodic || rank < on.size() - 1);
  expect_messages(counts, neighbours, static_cast<std::int64_t>(halo * sizeof(double)), tag, what);
  if (neighbours > 0) {
    EXPECT_GE(counts.count("MPI_Irecv"), 1) << what << ": receive with MPI_Irecv";
    EXPECT_GE(counts.count("MPI_Isend"), 1) << what << ": send with MPI_Isend";
    EXPECT_EQ(counts.count("MPI_Send") + counts.count("MPI_Recv") + counts.count("MPI_Sendrecv") +
                  counts.count("MPI_Ssend"),
              0)
        << what << ": the halo exchange uses nonblocking calls only";
  }
}

// Pieces of different sizes (never fewer cells than the halo), in an order that is
// not sorted by rank.
std::vector<std::size_t> uneven(int size, std::size_t at_least) {
  std::vector<std::size_t> owned;
  for (int r = 0; r < size; ++r) owned.push_back(at_least + static_cast<std::size_t>((r * 5) % size) * 3);
  return owned;
}

// Tag 31 with messages of tags 0, 30 and 32 from both neighbours, and of tag 31 from
// two ranks away, in flight.
TEST(HiddenHalo, UnevenPiecesOtherTagsWithDecoys) {
  const dtl::Comm& on = comm();
  const int rank = on.rank(), size = on.size();
  for (bool periodic : {true, false}) {
    for (std::size_t halo : {1, 3}) {
      if (!keep_going()) return;
      const int tag = 31;
      const std::size_t bytes = halo * sizeof(double);  // a decoy matched by mistake fits the ghosts
      std::vector<Bytes> keep;
      std::vector<MPI_Request> requests;
      keep.reserve(7);
      for (int other : {0, 30, 32}) {
        send_decoy(on, keep, requests, (rank + 1) % size, other, bytes);
        send_decoy(on, keep, requests, (rank - 1 + size) % size, other, bytes);
      }
      send_decoy(on, keep, requests, (rank + 2) % size, tag, bytes);
      check_exchange(on, uneven(size, halo + 1), halo, periodic, tag);
      for (int other : {0, 30, 32}) {
        EXPECT_TRUE(decoy_waiting(on, (rank - 1 + size) % size, other, bytes));
        EXPECT_TRUE(decoy_waiting(on, (rank + 1) % size, other, bytes));
      }
      EXPECT_TRUE(decoy_waiting(on, (rank - 2 + size) % size, tag, bytes));
      DTL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    }
  }
}

// Wide halos (well above the eager limit) on ranks that are not MPI_COMM_WORLD's.
TEST(HiddenHalo, WideHalosOnCommunicatorsOtherThanTheWorld) {
  for (const dtl::Comm& on : {reversed(), half()}) {
    for (bool periodic : {true, false}) {
      if (!keep_going()) return;
      check_exchange(on, uneven(on.size(), 1000), 700, periodic, 2024);
    }
  }
}

// u' = u + k (u[i-2] - 2 u[i] + u[i+2]) needs two ghost cells a side: 30 steps on the
// reversed ranks, 59 cells in a ring, against one process; the same expression on the
// same values either way, so the results agree exactly.
TEST(HiddenHalo, WideStencilMatchesSingleProcess) {
  const dtl::Comm on = reversed();
  const int rank = on.rank(), size = on.size();
  const std::size_t cells = 59, halo = 2;
  const double k = 0.125;
  std::vector<double> serial(cells);
  for (std::size_t g = 0; g < cells; ++g) serial[g] = static_cast<double>((g * 7907) % 97);
  std::size_t first = 0;
  for (int r = 0; r < rank; ++r) first += cells / size + (r < static_cast<int>(cells % size) ? 1 : 0);
  const std::size_t n = cells / size + (rank < static_cast<int>(cells % size) ? 1 : 0);
  std::vector<double> field(n + 2 * halo), next(n + 2 * halo);
  for (std::size_t i = 0; i < n; ++i) field[halo + i] = serial[first + i];
  for (int step = 0; step < 30; ++step) {
    std::vector<double> s_next(cells);
    for (std::size_t g = 0; g < cells; ++g) {
      s_next[g] = serial[g] + k * (serial[(g + cells - 2) % cells] - 2.0 * serial[g] + serial[(g + 2) % cells]);
    }
    serial.swap(s_next);
    dtl::lab01::halo_exchange(on, field, halo, true, 17);
    for (std::size_t i = halo; i < halo + n; ++i) {
      next[i] = field[i] + k * (field[i - 2] - 2.0 * field[i] + field[i + 2]);
    }
    field.swap(next);
  }
  EXPECT_TRUE(buffers_equal(std::vector<double>(serial.begin() + first, serial.begin() + first + n),
                            std::vector<double>(field.begin() + halo, field.begin() + halo + n),
                            "cells after 30 steps with two ghost cells a side" + on_rank(on)));
}

TEST(HiddenHalo, RejectsBadArguments) {
  std::vector<double> field(8);  // 8 cells: 2 owned with halo 3 is too few
  using dtl::InvalidArgument;
  EXPECT_THAT([&] { dtl::lab01::halo_exchange(comm(), field, 3, true, 0); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'field'")));
  EXPECT_THAT([&] { dtl::lab01::halo_exchange(comm(), field, 1, true, -5); },
              ThrowsMessage<InvalidArgument>(HasSubstr("'tag'")));
}

}  // namespace
