/// @file
/// @brief Lab 01 — point-to-point MPI: the API you implement in src/.
///
/// Four tasks, each in its own file under src/:
///   - ping_pong.cc   ping_pong():      the round trip every latency number comes from
///   - ring.cc        ring_shift():     a ring that cannot deadlock, at any message size
///   - halo.cc        halo_exchange():  nonblocking neighbour exchange on a 1-D grid
///   - alpha_beta.cc  fit_alpha_beta(): the latency/bandwidth model from measurements
///
/// Conventions: `comm` is the communicator to use (never MPI_COMM_WORLD inside
/// a lab function); counts are in elements, sizes in bytes; every function
/// checks its arguments first and throws dtl::InvalidArgument naming the bad one.
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <span>

namespace dtl::lab01 {

// ---------------------------------------------------------------------------
// Task A: ping-pong
// ---------------------------------------------------------------------------

/// @brief Bounces a message between two ranks `iterations` times and times it.
///
/// Each iteration: `initiator` sends `send_buf` to `responder`; `responder`
/// receives it into its `recv_buf` and sends that back; `initiator` receives the
/// echo into its `recv_buf`. Every message uses `tag`. Ranks other than the two
/// return 0 at once without communicating.
///
/// Collective in the sense that every rank of `comm` must call it.
/// @param[in] comm the communicator (at least 2 ranks).
/// @param[in] send_buf the message; read on the initiator only.
/// @param[out] recv_buf same size as `send_buf`; on return, on both ranks, it
///                      holds the initiator's message.
/// @param[in] initiator rank that sends first and measures the time.
/// @param[in] responder rank that echoes; must differ from `initiator`.
/// @param[in] iterations round trips to make, at least 1.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @return on the initiator, the mean seconds per round trip (MPI_Wtime); 0 elsewhere.
/// @throws dtl::InvalidArgument on a bad rank, size, iteration count or tag.
double ping_pong(MPI_Comm comm, std::span<const std::byte> send_buf, std::span<std::byte> recv_buf,
                 int initiator, int responder, int iterations, int tag);

// ---------------------------------------------------------------------------
// Task B: the ring
// ---------------------------------------------------------------------------

/// @brief Shifts every rank's buffer one step to the right around the ring.
///
/// Rank r sends `send_buf` to rank (r + 1) mod P and receives the message of
/// rank (r - 1 + P) mod P into `recv_buf`. With one rank, it sends to itself.
/// Must not deadlock for any message size: above the eager limit a blocking
/// send waits for the matching receive, so "everyone sends, then everyone
/// receives" hangs. See the handout, section "Eager and rendezvous".
///
/// Collective: every rank of `comm` must call it with the same size and tag.
/// @param[in] comm the communicator (any size ≥ 1).
/// @param[in] send_buf this rank's message.
/// @param[out] recv_buf same size as `send_buf`; receives the left neighbour's.
/// @param[in] tag the tag of the messages, in [0, 32767].
/// @throws dtl::InvalidArgument if the sizes differ or the tag is out of range.
void ring_shift(MPI_Comm comm, std::span<const std::byte> send_buf, std::span<std::byte> recv_buf,
                int tag);

// ---------------------------------------------------------------------------
// Task C: halo exchange on a 1-D decomposition
// ---------------------------------------------------------------------------

/// @brief Fills this rank's ghost cells from its neighbours' edge cells.
///
/// The global 1-D grid is split into contiguous pieces, one per rank in rank
/// order. This rank's `field` is laid out as
///
///     [ left ghosts (halo) | owned cells (n) | right ghosts (halo) ]
///
/// so `field.size() == n + 2 * halo`. On return the left ghosts hold the last
/// `halo` owned cells of rank r-1 and the right ghosts the first `halo` owned
/// cells of rank r+1. With `periodic`, rank 0's left neighbour is rank P-1 (and
/// P-1's right neighbour is 0); without it, the outer ghosts of ranks 0 and P-1
/// are left untouched. Owned cells are never modified.
///
/// Use nonblocking calls (MPI_Irecv, MPI_Isend, MPI_Waitall): post all four
/// transfers, then wait once. The tests check that you use MPI_Irecv and
/// MPI_Isend and no blocking send or receive.
///
/// Collective: every rank of `comm` must call it with the same halo, periodic and tag.
/// @param[in] comm the communicator.
/// @param[in,out] field ghosts, owned cells, ghosts (see above).
/// @param[in] halo ghost cells on each side; 0 is allowed (nothing to do).
/// @param[in] periodic whether the grid wraps around.
/// @param[in] tag the tag of the messages, in [0, 32767].
/// @throws dtl::InvalidArgument if `field` holds fewer than `halo` owned cells, or
///         the tag is out of range.
void halo_exchange(MPI_Comm comm, std::span<double> field, std::size_t halo, bool periodic,
                   int tag);

// ---------------------------------------------------------------------------
// Task D: the alpha-beta cost model
// ---------------------------------------------------------------------------

/// @brief One measurement: the one-way time of a message of `bytes` bytes.
struct Sample {
  std::size_t bytes;  ///< message size
  double seconds;     ///< measured one-way time (half a round trip)
};

/// @brief The alpha-beta model of a link: time(n) = alpha + beta * n.
struct AlphaBeta {
  double alpha;  ///< latency, seconds (the time of an empty message)
  double beta;   ///< seconds per byte (1/beta is the bandwidth)
  /// @param[in] bytes a message size.
  /// @return the predicted one-way seconds for a message of that size.
  double predict(std::size_t bytes) const { return alpha + beta * static_cast<double>(bytes); }
};

/// @brief Fits alpha and beta to measurements by weighted least squares.
///
/// Minimizes the sum of squared *relative* errors,
///     sum_i ((alpha + beta * n_i - t_i) / t_i)^2,
/// so that a 1-microsecond message counts as much as a 1-millisecond one (plain
/// least squares would fit the large messages only and make alpha meaningless).
/// @param[in] samples at least two, with at least two different sizes, every
///                    `seconds` positive and finite.
/// @return the fitted model.
/// @throws dtl::InvalidArgument naming `samples` when that does not hold.
AlphaBeta fit_alpha_beta(std::span<const Sample> samples);

}  // namespace dtl::lab01
