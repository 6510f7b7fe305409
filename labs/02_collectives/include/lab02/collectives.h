/// @file
/// @brief Lab 02 — collectives built from point-to-point messages: the API you implement in src/.
///
/// Five families, one file each under src/:
///   - broadcast.cc       broadcast_binomial(), broadcast_scatter_allgather(), broadcast()
///   - scatter_gather.cc  scatter(), gather()                (binomial trees)
///   - reduce.cc          reduce()                           (binomial tree; sum, max, min)
///   - allgather.cc       allgather_ring(), allgather_recursive_doubling()
///   - alltoall.cc        alltoall_pairwise()
///
/// Only point-to-point MPI is allowed inside them (MPI_Send, MPI_Recv, MPI_Sendrecv,
/// MPI_Isend, MPI_Irecv, MPI_Wait*): the tests trace every MPI call and fail when a
/// vendor collective (MPI_Bcast, MPI_Reduce, ...) is called, naming it.
///
/// Conventions (as in lab 01): `comm` is the communicator to use (never
/// MPI_COMM_WORLD inside a lab function); counts are in elements, sizes in bytes;
/// ranks are ranks of `comm`; every message of one call carries `tag`, and a receive
/// names its source (no MPI_ANY_SOURCE, no MPI_ANY_TAG). Every function checks its
/// arguments first, on every rank, and throws dtl::InvalidArgument naming the bad
/// one. Every function is collective: every rank of `comm` must call it, with the
/// same root, tag and counts, in the same order as the other collectives.
///
/// Element types. Each collective is a function template over the element type,
/// instantiated (in src/) for float, double and std::int32_t only — the
/// dtl::Element concept says so at compile time. Why templates rather than three
/// overloads: the algorithm is the same for every type; only the MPI datatype
/// (dtl::mpi_datatype<T>()) and, for reduce, the arithmetic change. Why the bodies
/// live in src/ and not here: they are what you write. Call them with the element
/// type spelled out; containers then convert to spans on their own:
///
///     std::vector<float> v(n), all(P * n);
///     dtl::lab02::broadcast_binomial<float>(comm, v, root, tag);
///     dtl::lab02::allgather_ring<float>(comm, v, all, tag);
///
/// (Without `<float>` the compiler must deduce T from std::span<const T>, which a
/// std::vector<float> is not, and it gives up.)
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "harness/dtype.h"
#include "harness/reduce_op.h"

namespace dtl::lab02 {

// The element types (dtl::Element: float, double, std::int32_t) and the
// reductions (dtl::ReduceOp; reduce() takes kSum, kMax and kMin) are the
// harness's: harness/dtype.h and harness/reduce_op.h.

// ---------------------------------------------------------------------------
// Task A: broadcast
// ---------------------------------------------------------------------------

/// @brief Broadcast along a binomial tree: `root`'s `buf` ends up in every rank's `buf`.
///
/// The binomial tree of handout section (a), for any root: in each round every rank
/// that holds the data passes the whole buffer to one that does not, so after round k
/// 2^k ranks hold it and L = ceil(log2 P) rounds suffice. What the tests count
/// (handout section (e)): every rank but the root receives exactly one message, the
/// root none; the root sends exactly L and no rank more than L; P - 1 messages in
/// all, each of the whole buffer, all on `tag`. Which rank sends to which is the task
/// (handout Task A). Cost: ceil(log2 P) * (alpha + n * beta) for n bytes.
///
/// Collective: every rank of `comm` must call it with the same root, tag and size.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf the message: read on the root, overwritten everywhere else;
///                    the same number of elements on every rank.
/// @param[in] root the rank whose `buf` is broadcast.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `root` or `tag` when out of range.
template <Element T>
void broadcast_binomial(MPI_Comm comm, std::span<T> buf, int root, int tag);

/// @brief Broadcast for large messages (van de Geijn): a binomial scatter of P
/// chunks, then a ring allgather of the chunks.
///
/// `buf` is cut into P chunks of ceil(n / P) elements (the last ones shorter or
/// empty; handout section (d)). The scatter gives every rank one chunk along the
/// binomial tree (a subtree receives its chunks in one message); then P - 1 ring
/// steps pass the chunks around until every rank has all of them. At most
/// ceil(log2 P) + P - 1 messages per rank; the root sends at most 2 (n - floor(n / P))
/// elements' worth of bytes.
/// Cost: (ceil(log2 P) + P - 1) * alpha + 2 (P-1)/P * n * beta: the root sends
/// about 2n bytes instead of ceil(log2 P) * n, so it wins for large n and P >= 3.
///
/// Collective: every rank of `comm` must call it with the same root, tag and size.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf the message: read on the root, overwritten everywhere else;
///                    the same number of elements on every rank.
/// @param[in] root the rank whose `buf` is broadcast.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `root` or `tag` when out of range.
template <Element T>
void broadcast_scatter_allgather(MPI_Comm comm, std::span<T> buf, int root, int tag);

/// @brief Where broadcast() switches from the binomial tree to scatter + allgather, in
/// bytes (with 3 or more ranks). The alpha-beta model with lab 01's rendezvous fit
/// (alpha = 2.5 us, beta = 0.086 ns/B) puts the crossover at about 88 KB for 3 ranks
/// and 176 KB for 4; see the handout, and labs/02_collectives/bench/RESULTS.md for
/// what the 2-core course machine measures instead.
inline constexpr std::size_t kBroadcastSwitchBytes = 128 * 1024;

/// @brief Broadcast that picks the algorithm: broadcast_scatter_allgather() when there
/// are at least 3 ranks and buf.size_bytes() >= `switch_bytes`, broadcast_binomial()
/// otherwise. (With 2 ranks scatter + allgather moves the same bytes with one more
/// latency, so the tree always wins.)
///
/// Collective: every rank of `comm` must call it with the same root, tag, size and
/// `switch_bytes` (so that every rank picks the same algorithm).
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in,out] buf the message: read on the root, overwritten everywhere else.
/// @param[in] root the rank whose `buf` is broadcast.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @param[in] switch_bytes the size (buf.size_bytes()) from which scatter + allgather is used.
/// @throws dtl::InvalidArgument naming `root` or `tag` when out of range.
template <Element T>
void broadcast(MPI_Comm comm, std::span<T> buf, int root, int tag,
               std::size_t switch_bytes = kBroadcastSwitchBytes);

// ---------------------------------------------------------------------------
// Task B: scatter and gather
// ---------------------------------------------------------------------------

/// @brief Scatter along a binomial tree: rank r receives block r of the root's `send_buf`.
///
/// `send_buf` on the root holds P blocks of `recv_buf.size()` elements, block r for
/// rank r. Over the binomial tree of handout section (a): every rank but the root
/// receives exactly one message, the root sends exactly ceil(log2 P) and nobody more,
/// and the root's messages carry (P - 1) blocks in all (which blocks each message
/// carries is the task: handout Task B).
/// Cost: ceil(log2 P) * alpha + (P-1)/P * n * beta, n = the root's bytes (a linear
/// scatter, the root sending P - 1 messages, costs (P-1) alpha + the same bytes).
///
/// Collective: every rank of `comm` must call it with the same root, tag and count.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in] send_buf on the root: P * recv_buf.size() elements, in rank order; on
///                     the other ranks it is not read and may be empty.
/// @param[out] recv_buf this rank's block; the same size on every rank.
/// @param[in] root the rank that holds the data.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `root`, `tag` or `send_buf` (wrong size on
///         the root, or neither empty nor the root's size elsewhere).
template <Element T>
void scatter(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int root, int tag);

/// @brief Gather along a binomial tree: block r of the root's `recv_buf` becomes rank r's `send_buf`.
///
/// The mirror image of scatter(): every rank but the root sends exactly one message,
/// the root receives exactly ceil(log2 P) and nobody more (handout Task B). Cost:
/// ceil(log2 P) * alpha + (P-1)/P * n * beta, n = the root's bytes.
///
/// Collective: every rank of `comm` must call it with the same root, tag and count.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in] send_buf this rank's block; the same size on every rank.
/// @param[out] recv_buf on the root: P * send_buf.size() elements, filled in rank
///                      order; on the other ranks it is not touched and may be empty.
/// @param[in] root the rank that receives the data.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `root`, `tag` or `recv_buf` (wrong size on
///         the root, or neither empty nor the root's size elsewhere).
template <Element T>
void gather(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int root, int tag);

// ---------------------------------------------------------------------------
// Task C: reduce
// ---------------------------------------------------------------------------

/// @brief Reduce along a binomial tree: the root's `recv_buf` gets op(send_buf of every rank).
///
/// Each rank combines its `send_buf` with the partial results of its children (one
/// message from each) and sends the combination to its parent: one message per
/// non-root, element-wise `op`. Cost: ceil(log2 P) * (alpha + n * beta + n * gamma),
/// gamma the time to combine a byte.
///
/// Collective: every rank of `comm` must call it with the same op, root, tag and count.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in] send_buf this rank's contribution; the same size on every rank.
/// @param[out] recv_buf on the root: send_buf.size() elements, the result; on the
///                      other ranks it is not touched and may be empty.
/// @param[in] op kSum, kMax or kMin.
/// @param[in] root the rank that receives the result.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `op`, `root`, `tag` or `recv_buf` (wrong size
///         on the root, or neither empty nor that size elsewhere).
template <Element T>
void reduce(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, ReduceOp op, int root,
            int tag);

// ---------------------------------------------------------------------------
// Task D: allgather
// ---------------------------------------------------------------------------

/// @brief Allgather around a ring: block r of every rank's `recv_buf` becomes rank r's `send_buf`.
///
/// Every rank talks only to its two neighbours: it sends exactly P - 1 messages of
/// one block to rank + 1 and receives P - 1 from rank - 1, (P-1)/P of the result
/// each way, which no allgather can beat (handout Task D). Cost: (P-1) * alpha +
/// (P-1)/P * n * beta, n = the result's bytes.
///
/// Collective: every rank of `comm` must call it with the same tag and count.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in] send_buf this rank's block; the same size on every rank.
/// @param[out] recv_buf P * send_buf.size() elements, in rank order.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `recv_buf` (wrong size) or `tag`.
template <Element T>
void allgather_ring(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int tag);

/// @brief Allgather by recursive doubling; the number of ranks must be a power of two.
///
/// Exactly log2 P messages per rank, and still only (P - 1) blocks received in all
/// (handout Task D). Cost: log2 P * alpha + (P-1)/P * n * beta: the ring's bandwidth
/// term with a logarithmic latency term.
///
/// Collective: every rank of `comm` must call it with the same tag and count.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator; its size must be a power of two (1, 2, 4, 8, ...).
/// @param[in] send_buf this rank's block; the same size on every rank.
/// @param[out] recv_buf P * send_buf.size() elements, in rank order.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `comm` (size not a power of two), `recv_buf`
///         (wrong size) or `tag`.
template <Element T>
void allgather_recursive_doubling(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf,
                                  int tag);

// ---------------------------------------------------------------------------
// Task E: alltoall
// ---------------------------------------------------------------------------

/// @brief All-to-all by pairwise exchange: block j of rank i's `send_buf` becomes
/// block i of rank j's `recv_buf`.
///
/// A rank's own block is a local copy: nobody sends to itself. Every rank sends
/// exactly P - 1 messages of one block and receives P - 1 (the tests count them).
/// "Pairwise" is the design goal: P - 1 rounds in each of which every rank sends one
/// block and receives one, so no receiver is flooded while others idle; which
/// partners meet in which round is the task (handout Task E). Cost:
/// (P-1) * (alpha + b * beta), b = one block's bytes.
///
/// Collective: every rank of `comm` must call it with the same tag and size.
/// @tparam T float, double or std::int32_t.
/// @param[in] comm the communicator (any size >= 1).
/// @param[in] send_buf P blocks of equal size, block j for rank j.
/// @param[out] recv_buf as many elements as `send_buf`; block i from rank i.
/// @param[in] tag the tag of every message, in [0, 32767].
/// @throws dtl::InvalidArgument naming `send_buf` (not a multiple of P elements),
///         `recv_buf` (a different size) or `tag`.
template <Element T>
void alltoall_pairwise(MPI_Comm comm, std::span<const T> send_buf, std::span<T> recv_buf, int tag);

}  // namespace dtl::lab02
