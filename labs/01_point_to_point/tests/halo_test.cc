// Task C, halo_exchange(): ghosts hold the neighbours' edge cells (checked
// against the global grid), edges of a non-periodic grid stay untouched, owned
// cells never change, the calls are nonblocking, and a diffusion run on P ranks
// equals the same run in one process, bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "harness/error.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/mpi_tracer.h"
#include "lab01/point_to_point.h"

namespace {

using dtl::lab01::halo_exchange;
using dtl::testing::buffers_equal;
using dtl::testing::comm;

constexpr double kUntouched = -1.0;

// A 1-D grid cut into pieces of `owned(r)` cells; cell g of the global grid holds g.
struct Grid {
  std::vector<std::size_t> owned;  // cells per rank
  std::size_t first(int r) const { return std::accumulate(owned.begin(), owned.begin() + r, std::size_t{0}); }
  std::size_t total() const { return std::accumulate(owned.begin(), owned.end(), std::size_t{0}); }
};

// What rank r's field must hold after the exchange.
std::vector<double> expected_field(const Grid& grid, int r, std::size_t halo, bool periodic) {
  const int size = static_cast<int>(grid.owned.size());
  const std::size_t n = grid.owned[r];
  std::vector<double> field(n + 2 * halo, kUntouched);
  for (std::size_t i = 0; i < n; ++i) field[halo + i] = static_cast<double>(grid.first(r) + i);
  const bool has_left = periodic || r > 0;
  const bool has_right = periodic || r < size - 1;
  const int left = (r - 1 + size) % size;
  const int right = (r + 1) % size;
  for (std::size_t i = 0; i < halo; ++i) {
    if (has_left) field[i] = static_cast<double>(grid.first(left) + grid.owned[left] - halo + i);
    if (has_right) field[halo + n + i] = static_cast<double>(grid.first(right) + i);
  }
  return field;
}

void check_exchange(const Grid& grid, std::size_t halo, bool periodic, int tag) {
  const int rank = comm().rank();
  std::vector<double> field = expected_field(grid, rank, halo, periodic);
  for (std::size_t i = 0; i < halo; ++i) field[i] = field[field.size() - 1 - i] = kUntouched;
  dtl::trace::reset_counts();
  halo_exchange(comm(), field, halo, periodic, tag);
  const auto counts = dtl::trace::counts();
  EXPECT_TRUE(buffers_equal(expected_field(grid, rank, halo, periodic), field,
                            "field (halo " + std::to_string(halo) + ", " +
                                (periodic ? "periodic" : "not periodic") + ", " +
                                std::to_string(grid.owned[rank]) + " owned cells)"));
  const bool communicates = halo > 0 && (periodic || comm().size() > 1);
  if (communicates) {
    EXPECT_GE(counts.count("MPI_Irecv"), 1) << "rank " << rank << ": receive with MPI_Irecv";
    EXPECT_GE(counts.count("MPI_Isend"), 1) << "rank " << rank << ": send with MPI_Isend";
    EXPECT_EQ(counts.count("MPI_Send") + counts.count("MPI_Recv") + counts.count("MPI_Sendrecv"), 0)
        << "rank " << rank << ": the halo exchange must use nonblocking calls only";
    EXPECT_EQ(counts.sends_by_tag.size(), 1u) << "rank " << rank << ": every message must carry the tag";
    EXPECT_EQ(counts.sends_by_tag.count(tag), 1u) << "rank " << rank << ": every message must carry tag " << tag;
    EXPECT_EQ(counts.any_source_receives + counts.any_tag_receives, 0)
        << "rank " << rank << ": receive from each neighbour with the tag, not MPI_ANY_SOURCE/MPI_ANY_TAG";
  }
}

Grid even_grid(std::size_t n) { return Grid{std::vector<std::size_t>(comm().size(), n)}; }

TEST(Halo, FillsGhostsFromNeighbours) {
  for (bool periodic : {false, true}) {
    for (std::size_t halo : {1, 2, 5}) {
      for (std::size_t n : {halo, halo + 1, std::size_t{37}}) check_exchange(even_grid(n), halo, periodic, 2);
    }
  }
}

TEST(Halo, PiecesOfDifferentSizes) {
  Grid grid;
  for (int r = 0; r < comm().size(); ++r) grid.owned.push_back(3 + 4 * r);
  for (bool periodic : {false, true}) check_exchange(grid, 3, periodic, 1);
}

TEST(Halo, LargeHalos) {
  for (bool periodic : {false, true}) check_exchange(even_grid(40000), 10000, periodic, 0);
}

TEST(Halo, ZeroHaloChangesNothing) {
  std::vector<double> field(5, 2.5);
  halo_exchange(comm(), field, 0, true, 0);
  EXPECT_TRUE(buffers_equal(std::vector<double>(5, 2.5), field, "field"));
}

TEST(Halo, KeepsTagsApart) {
  const int rank = comm().rank();
  const int size = comm().size();
  const std::vector<double> decoy(8, 1000.0 + rank);
  MPI_Request requests[2];
  DTL_MPI_CHECK(MPI_Isend(decoy.data(), 8, MPI_DOUBLE, (rank + 1) % size, 6, comm(), &requests[0]));
  DTL_MPI_CHECK(MPI_Isend(decoy.data(), 8, MPI_DOUBLE, (rank - 1 + size) % size, 8, comm(), &requests[1]));
  check_exchange(even_grid(8), 2, true, 7);
  const int left = (rank - 1 + size) % size, right = (rank + 1) % size;
  EXPECT_TRUE(dtl::testing::pending_message(left, 6, std::vector<double>(8, 1000.0 + left), "the tag 6 message"));
  EXPECT_TRUE(dtl::testing::pending_message(right, 8, std::vector<double>(8, 1000.0 + right), "the tag 8 message"));
  DTL_MPI_CHECK(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE));
}

// Explicit diffusion u' = u + k (u[i-1] - 2 u[i] + u[i+1]) on a ring of 53
// cells (not divisible by 2, 3 or 4): P ranks with halo exchange against one
// process on the whole grid. Each cell is computed by the same expression from
// the same three values either way, so the results agree exactly.
TEST(Halo, DiffusionMatchesSingleProcess) {
  const int rank = comm().rank();
  const int size = comm().size();
  const std::size_t cells = 53;
  const int steps = 25;
  const double k = 0.25;
  std::vector<double> serial(cells);
  for (std::size_t g = 0; g < cells; ++g) serial[g] = static_cast<double>((g * 7919) % 101);

  Grid grid;
  for (int r = 0; r < size; ++r) grid.owned.push_back(cells / size + (r < static_cast<int>(cells % size) ? 1 : 0));
  const std::size_t n = grid.owned[rank];
  const std::size_t first = grid.first(rank);
  std::vector<double> field(n + 2), next(n + 2);
  for (std::size_t i = 0; i < n; ++i) field[1 + i] = serial[first + i];

  for (int step = 0; step < steps; ++step) {
    std::vector<double> s_next(cells);
    for (std::size_t g = 0; g < cells; ++g) {
      const double l = serial[(g + cells - 1) % cells], c = serial[g], r = serial[(g + 1) % cells];
      s_next[g] = c + k * (l - 2.0 * c + r);
    }
    serial.swap(s_next);

    halo_exchange(comm(), field, 1, true, 0);
    for (std::size_t i = 1; i <= n; ++i) next[i] = field[i] + k * (field[i - 1] - 2.0 * field[i] + field[i + 1]);
    field.swap(next);
  }
  const std::vector<double> mine(field.begin() + 1, field.begin() + 1 + n);
  const std::vector<double> expected(serial.begin() + first, serial.begin() + first + n);
  EXPECT_TRUE(buffers_equal(expected, mine, "cells after 25 diffusion steps"));
}

TEST(Halo, RejectsBadArguments) {
  std::vector<double> field(5);
  EXPECT_THAT([&] { halo_exchange(comm(), field, 2, false, 0); },
              ::testing::ThrowsMessage<dtl::InvalidArgument>(::testing::HasSubstr("'field'")));
  EXPECT_THAT([&] { halo_exchange(comm(), field, 1, false, 40000); },
              ::testing::ThrowsMessage<dtl::InvalidArgument>(::testing::HasSubstr("'tag'")));
}

}  // namespace
