// Task A, the schedule: ring_step() is checked by playing the whole ring with
// sets instead of numbers. Each (rank, chunk) holds the set of ranks whose
// contribution it contains; a reduce step unites the incoming set with the
// local one, a copy step replaces it. The oracle is what an allreduce means:
// after the reduce-scatter rank r's chunk r holds all P contributions (and no
// set ever counts a rank twice), after the allgather every chunk on every rank
// does. Sets cannot be fooled by a schedule that happens to sum right.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/error.h"
#include "lab03/ring.h"
#include "ring_test_util.h"

namespace {

using dtl::lab03::ring_step;
using dtl::lab03::RingStep;
using namespace lab03_test;

// contributions[r][c]: bit q set when rank q's value of chunk c is in rank r's chunk c.
using Sets = std::vector<std::vector<std::uint32_t>>;

std::string describe(int p, int rank, int step, const RingStep& s) {
  return "P=" + std::to_string(p) + ", rank " + std::to_string(rank) + ", step " + std::to_string(step) +
         ": ring_step = {send_chunk " + std::to_string(s.send_chunk) + ", recv_chunk " +
         std::to_string(s.recv_chunk) + ", reduce " + (s.reduce ? "true" : "false") + "}";
}

// Plays steps [first, last) of the schedule on `sets`; false (with failures) on the first inconsistency.
bool play(int p, Sets& sets, int first, int last) {
  for (int step = first; step < last; ++step) {
    std::vector<RingStep> table(p);
    for (int r = 0; r < p; ++r) table[r] = ring_step(r, p, step);
    Sets next = sets;
    for (int r = 0; r < p; ++r) {
      const int left = (r - 1 + p) % p;
      const RingStep& s = table[r];
      if (s.send_chunk < 0 || s.send_chunk >= p || s.recv_chunk < 0 || s.recv_chunk >= p) {
        ADD_FAILURE() << describe(p, r, step, s) << ": chunk indices must be in [0, P)";
        return false;
      }
      if (table[left].send_chunk != s.recv_chunk) {
        ADD_FAILURE() << describe(p, r, step, s) << ", but its left neighbour " << left << " sends chunk "
                      << table[left].send_chunk << ": what one rank sends is what the next receives";
        return false;
      }
      if (s.reduce != (step < p - 1)) {
        ADD_FAILURE() << describe(p, r, step, s) << ": steps 0..P-2 reduce, steps P-1..2P-3 copy";
        return false;
      }
      const std::uint32_t incoming = sets[left][s.recv_chunk];
      std::uint32_t& mine = next[r][s.recv_chunk];
      if (s.reduce && (mine & incoming) != 0) {
        ADD_FAILURE() << describe(p, r, step, s) << ": adds a contribution that chunk " << s.recv_chunk
                      << " already holds (it would be counted twice)";
        return false;
      }
      mine = s.reduce ? (mine | incoming) : incoming;
    }
    sets = next;
  }
  return true;
}

TEST(RingSchedule, EveryChunkCollectsEveryRankOnce) {
  for (int p = 2; p <= 9; ++p) {
    const std::uint32_t all = (1u << p) - 1;
    Sets sets(p, std::vector<std::uint32_t>(p));
    for (int r = 0; r < p; ++r) {
      for (int c = 0; c < p; ++c) sets[r][c] = 1u << r;
    }
    if (!play(p, sets, 0, p - 1)) return;
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(sets[r][r], all) << "P=" << p << ": after the reduce-scatter (steps 0.." << p - 2 << ") rank " << r
                                 << "'s chunk " << r << " must hold all " << p << " contributions";
    }
    if (::testing::Test::HasFailure() || !play(p, sets, p - 1, 2 * (p - 1))) return;
    for (int r = 0; r < p; ++r) {
      for (int c = 0; c < p; ++c) {
        EXPECT_EQ(sets[r][c], all) << "P=" << p << ": after the allgather rank " << r << "'s chunk " << c
                                   << " must hold the complete sum";
      }
    }
  }
}

TEST(RingSchedule, RejectsBadArguments) {
  EXPECT_THROW(ring_step(0, 1, 0), dtl::InvalidArgument) << "world_size 1 has no ring steps";
  EXPECT_THROW(ring_step(0, 0, 0), dtl::InvalidArgument);
  EXPECT_THROW(ring_step(-1, 4, 0), dtl::InvalidArgument) << "rank -1";
  EXPECT_THROW(ring_step(4, 4, 0), dtl::InvalidArgument) << "rank 4 of 4";
  EXPECT_THROW(ring_step(0, 4, -1), dtl::InvalidArgument) << "step -1";
  EXPECT_THROW(ring_step(0, 4, 6), dtl::InvalidArgument) << "step 6 = 2(P-1) at P=4";
  try {
    ring_step(0, 4, 6);
  } catch (const dtl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << "the error names the argument: " << e.what();
  } catch (...) {
  }
}

TEST(RingSchedule, ChunkLayoutCoversTheBufferInOrder) {
  // The layout is given in ring.h; this pins the contract the tests rely on.
  EXPECT_EQ(chunk_counts(10).size(), static_cast<std::size_t>(comm().size()));
  for (int p = 1; p <= 9; ++p) {
    for (std::size_t count : {0, 1, 2, 7, 10, 100003}) {
      EXPECT_EQ(chunk_begin(count, p, 0), 0u);
      EXPECT_EQ(chunk_begin(count, p, p), count);
      for (int c = 0; c < p; ++c) {
        const std::size_t n = chunk_count(count, p, c);
        EXPECT_TRUE(n == count / p || n == count / p + 1) << "P=" << p << " count " << count << " chunk " << c;
      }
    }
  }
  EXPECT_EQ(chunk_begin(10, 4, 1), 3u);
  EXPECT_EQ(chunk_begin(10, 4, 2), 6u);
  EXPECT_EQ(chunk_begin(10, 4, 3), 8u);
}

}  // namespace
