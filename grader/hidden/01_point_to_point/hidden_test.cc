// Hidden tests for lab 01 (example set): more ranks and sizes the public tests
// do not use. Same oracles as the public tests: closed forms from the pattern.
#include <gtest/gtest.h>

#include <vector>

#include "harness/testing/mpi_test.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::testing::buffers_equal;
using dtl::testing::comm;
using dtl::testing::pattern_bytes;

TEST(HiddenRing, OddSizesManyRanks) {
  const int rank = comm().rank();
  const int size = comm().size();
  for (std::size_t bytes : {2, 4095, 12289, (3 << 20) + 5}) {
    const auto send = pattern_bytes(bytes, 3 * rank + 1);
    std::vector<std::byte> recv(bytes);
    dtl::lab01::ring_shift(comm(), send, recv, 321);
    EXPECT_TRUE(buffers_equal(pattern_bytes(bytes, 3 * ((rank - 1 + size) % size) + 1), recv, "recv_buf"));
  }
}

TEST(HiddenPingPong, DistantPair) {
  const int rank = comm().rank();
  const int last = comm().size() - 1;
  for (std::size_t bytes : {1, 9999, 2 << 20}) {
    const auto message = pattern_bytes(bytes, 42);
    // Only the initiator's message may arrive anywhere: every other rank passes its own.
    const auto send = rank == last ? message : pattern_bytes(bytes, rank);
    std::vector<std::byte> recv(bytes);
    dtl::lab01::ping_pong(comm(), send, recv, last, 1, 4, 17);
    if (rank == last || rank == 1) {
      EXPECT_TRUE(buffers_equal(message, recv, "recv_buf"));
    }
  }
}

TEST(HiddenHalo, WideHalos) {
  const int rank = comm().rank();
  const int size = comm().size();
  const std::size_t halo = 700, n = 1000;
  std::vector<double> field(n + 2 * halo, -1.0);
  for (std::size_t i = 0; i < n; ++i) field[halo + i] = static_cast<double>(rank * n + i);
  std::vector<double> expected = field;  // owned cells must stay as they are
  dtl::lab01::halo_exchange(comm(), field, halo, true, 4);
  const int left = (rank - 1 + size) % size, right = (rank + 1) % size;
  for (std::size_t i = 0; i < halo; ++i) {
    expected[i] = static_cast<double>(left * n + n - halo + i);
    expected[halo + n + i] = static_cast<double>(right * n + i);
  }
  EXPECT_TRUE(buffers_equal(expected, field, "field"));
}

}  // namespace
