/// @file
/// @brief Lab 09 — the parameter server: the API you implement in src/.
///
/// Allreduce (labs 03-06) keeps a full copy of the model on every rank and
/// averages gradients in lock-step. The **parameter server** (Li et al., 2014)
/// splits the job in two roles: S **servers** hold the parameters, sharded by
/// key range, and apply the optimizer; W **workers** hold the data, compute
/// gradients, `push` them to the servers and `pull` fresh weights. Because the
/// servers decide when a pull is answered, the same code can train in lock-step
/// or let workers run ahead of each other. This lab builds, over MPI and the
/// training core (harness/nn):
///
///   - Task A (shard.cc): the keys (one per parameter tensor) cut into S
///     contiguous ranges balanced by element count (shard_keys(), server_of());
///   - Task B (clock.cc): the vector clock, one logical clock per worker, and
///     the rule of each consistency model: when may a worker read (VectorClock);
///   - Task C (server.cc): the server loop: pushes, clocks, deferred pulls,
///     per-step aggregation (BSP/SSP) or immediate updates (ASP), silent
///     workers found by timeout (ParameterServer);
///   - Task D (worker.cc): the worker's side of the protocol and its training
///     loop, with a straggler delay and a "silent from step t" fault
///     (WorkerClient, train_worker());
///   - Task E (checkpoint.cc): the server's state as bytes, and back
///     (ParameterServer::checkpoint(), ParameterServer::restore());
///   - Task F (engine.cc, lab09/engine.h): the dependency engine that overlaps
///     the pull of layer l + 1 with the compute of layer l.
///
/// and, given (labs/09_parameter_server/given/, compiled into both builds):
///   - ps_util.cc   the group (roles, the communicator, the options checked on
///                  every rank), the wire format, names.
///
/// See Note [Roles and keys], Note [The protocol], Note [Consistency models],
/// Note [Vector clock], Note [Silent workers], Note [Checkpoints] and
/// Note [PS vs allreduce bandwidth] below; the handout and the slides refer to them.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/nn/tensor.h"

namespace dtl::lab09 {

// Note [Roles and keys]
// ~~~~~~~~~~~~~~~~~~~~~
// N ranks, S servers: ranks 0 .. S-1 are servers (server s is rank s), ranks
// S .. N-1 are workers (worker w is rank S + w), W = N - S >= 1. A parameter
// server needs N >= 2: with one rank there is nobody to talk to, and PsGroup
// refuses it on every rank with an InvalidArgument naming `servers`.
//
// A **key** is one parameter tensor of the model, in Model::parameters() order
// (an MLP of depth 2 has six: fc0.weight, fc0.bias, fc1.weight, ... head.bias).
// Server s owns keys [bounds[s], bounds[s+1]): contiguous, so a server's values
// are one span of the model's flat buffer, and balanced by element count
// (shard_keys()). A server with more keys than elements to spare is fine; a
// server with no key at all is not (it would have nothing to do), so S <= keys.

// Note [The protocol]
// ~~~~~~~~~~~~~~~~~~~
// Every message travels on the group's own communicator (PsGroup::comm()). Six
// kinds, one tag each (Tag), payload encoded by encode()/decode() (given):
//
//     worker -> server   kPush   (key, step) + gradient     "my gradient of step t"
//     worker -> server   kClock  (step)                     "I finished step t"
//     worker -> server   kPull   (key, clock)               "I want key k, I am at clock c"
//     server -> worker   kReply + key  (key, version, status) + values (or an error text)
//     worker -> server   kHeartbeat                          "still here, waiting" (to every server)
//     worker -> server   kDone                               "I will send nothing more"
//
// One step of worker w (clock c = steps it has completed):
//
//     pull every key (each answered when the consistency model allows, Note [Consistency models])
//     forward, loss, backward on its own rows
//     push every key's gradient (tagged step c) to the key's server
//     clock(): kClock(c) to EVERY server, then c = c + 1
//
// The server receives with MPI_ANY_SOURCE and MPI_ANY_TAG (it serves whoever
// speaks) and handles messages in arrival order. MPI keeps the messages of one
// sender on one communicator in order, so a worker's pushes of step t are always
// handled before its kClock(t): when a server has a worker's clock t + 1, it has
// all of that worker's step-t gradients. A pull that may not be answered yet is
// kept (deferred) and answered later, when clocks advance. The worker waits for
// a reply with a deadline (2 * PsOptions::timeout_seconds), never forever, and
// while it waits it sends a kHeartbeat to every server every timeout / 4 seconds
// (Note [Silent workers]).

// Note [Consistency models]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Version v of a server's shard = the parameters after the updates of steps
// 0 .. v-1. A worker at clock c computing with version v is c - v steps stale.
//
// BSP (bulk synchronous): a pull at clock c is answered with version c: all of
// step c-1's gradients from every worker are in. Every worker computes step c
// with the same weights, so W workers on B/W rows each are one process on B
// rows (up to float rounding: the server sums W mean gradients, the process
// one mean over B rows). The price: every step waits for the slowest worker.
//
// SSP (stale synchronous, Ho et al., 2013) with bound s: a pull at clock c is
// answered as soon as version >= c - s, with the newest version there is. A
// worker can be at most s steps ahead of the slowest: with s = 1 it computes
// step c while step c - 1 is still being pushed by others. Updates of step t
// are still applied together, once every live worker has pushed step t (the
// server aggregates per step, in worker order: deterministic). BSP is SSP with
// s = 0 (and this lab implements them with one code path).
//
// ASP (asynchronous, Hogwild-style, Recht et al., 2011; Dean et al., 2012): a
// pull is answered at once with whatever the server has; every push is
// applied on arrival, scaled by 1/W (so W pushes move the weights as far as
// one BSP step). Nobody waits; staleness is unbounded.
//
// Worked example, W = 2, s = 1, worker 1 a straggler twice as slow:
//
//     time   worker 0 (clock)          worker 1 (clock)        server version
//      1     pull v0, step 0, push     pull v0, computing      0
//      2     clock -> 1; pull c=1:     ...                     0   (1 - 1 <= 0: answered, v0)
//            step 1 on v0, push
//      3     clock -> 2; pull c=2:     step 0 pushed, clock->1 1   (step 0 complete: applied)
//            2 - 1 <= 1: answered v1
//      4     step 2 on v1, push,       pull c=1: v1, step 1    1
//            clock -> 3; pull c=3:
//            needs v2: WAITS
//      6     (still waiting)           push, clock -> 2        2   (step 1 complete) -> answers c=3 with v2
//
// Under BSP worker 0 would wait at every step; under ASP it would never wait
// and would push gradients computed on weights ever further behind.

// Note [Vector clock]
// ~~~~~~~~~~~~~~~~~~~
// Each server keeps one logical clock per worker: clock[w] = the number of
// kClock messages from w, i.e. the steps w has completed (and pushed). Its
// minimum over the live workers is the slowest worker's progress; step t can
// be applied once min > t (everyone pushed it), so under BSP/SSP the version
// is the minimum. A worker lost (Note [Silent workers]) leaves the minimum. The
// tests read each server's event log (Event) and check at every answered pull
// that clock - version <= s, and that the clocks never run backwards.

// Note [Silent workers]
// ~~~~~~~~~~~~~~~~~~~~~
// Under Open MPI 4.1 (no ULFM), a process that really dies makes mpirun abort
// the whole job: the runtime sees a child exit without MPI_Finalize and kills
// every rank (unless mpirun --enable-recovery), and nothing collective can
// complete without it. Fault-tolerant MPI (ULFM's
// MPI_Comm_revoke/MPI_Comm_shrink) or elastic frameworks (torchelastic, Horovod
// elastic: restart the survivors from a checkpoint with a new world) handle real
// deaths. This lab models the part a parameter server decides for itself: a
// worker that goes silent (TrainOptions::silent_from_step: it stops all traffic
// from that step on, as if dead, and only rejoins at the test's end). A server
// cannot tell the two apart; tests/kill_check.cc kills a worker for real, under
// --enable-recovery, and checks the same outcomes.
//
// A server presumes worker w dead when w is not done, has no pull waiting at
// this server, and nothing came from it for timeout_seconds. A worker that waits
// for an answer from *another* server would look silent here; that is what the
// heartbeats are for: a worker waiting in pull() sends one to every server every
// timeout / 4. So only a worker that neither sends nor waits (a dead one, or one
// computing a step longer than the timeout) is taken for dead. Then:
//   - ASP and SSP go on without it: it leaves the minimum of the vector clock and
//     the steps it never pushed are applied with the gradients of the others
//     (averaged over those who pushed);
//   - BSP cannot: every later step needs its gradient. The server answers every
//     waiting and later pull with an error (status kFailed), naming the lost
//     worker and its step, and each live worker's pull throws StepFailed with it.
// The timeout must exceed the longest step any worker takes (a straggler's
// too), or a slow worker is taken for a dead one.
//
// How long a live worker waits for a reply follows from this: a server may
// rightly hold its pull until a silent worker is found, which is one timeout
// after that worker's last message, a moment *before* the pull was sent (by as
// little as one step). A worker that gave up after one timeout would race the
// server's verdict, and on a busy machine lose it: both would then be "lost".
// So pull() waits 2 * timeout_seconds for its answer.

// Note [Checkpoints]
// ~~~~~~~~~~~~~~~~~~
// A server's state is its key range, its values, its optimizer's state (the
// momentum of every key: without it, a restored run takes different steps), its
// version and its vector clock. checkpoint() writes them as bytes (the caller
// stores them where it likes), restore() reads them back into a server built for
// the same group and keys, so that training goes on from there exactly as if it
// had never stopped. Workers hold no state worth saving: they pull.

// Note [PS vs allreduce bandwidth]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// n bytes of gradients per worker and step, W workers, S servers, every rank on
// a link of B bytes/s. In a BSP step each server first receives W pushes of n/S
// bytes, then (after the update) sends W replies of n/S bytes, one message at a
// time on its link:
//
//     T_ps   = 2 W n / (S B)            (+ 2 W alpha)
//     T_ring = 2 (W - 1) n / (W B)      (+ 2 (W - 1) alpha; ring allreduce among the W workers)
//     T_ps / T_ring = W^2 / (S (W - 1))
//
// One server is W^2/(W - 1) times slower than the ring (4.5x at W = 3), and it
// grows with W: the server's link is the bottleneck, whatever the workers' links
// can do. S = W servers (one beside each worker) bring it to W/(W - 1), about
// the ring's; ps-lite and BytePS colocate servers with workers for exactly this
// reason. The bench measures both on the same emulated link (Link10GbE rows).

// ---------------------------------------------------------------------------
// Options, roles and the group (given: ps_util.cc)
// ---------------------------------------------------------------------------

/// @brief When a worker may read (Note [Consistency models]).
enum class Consistency {
  kBsp,  ///< bulk synchronous: every step waits for every worker
  kSsp,  ///< stale synchronous: at most `staleness` steps ahead of the slowest
  kAsp,  ///< asynchronous: never waits
};

/// @brief "bsp", "ssp" or "asp" (given).
/// @param[in] c the model.
/// @return its name.
const char* consistency_name(Consistency c);

/// @brief How the parameter server runs.
struct PsOptions {
  int servers = 1;                         ///< S, in [1, world size - 1] and at most the number of keys
  Consistency consistency = Consistency::kBsp;  ///< the consistency model
  int staleness = 0;                       ///< s for kSsp (>= 0); ignored otherwise
  nn::SgdOptions sgd{};                    ///< the servers' optimizer (per key)
  double timeout_seconds = 10.0;           ///< silence that makes a worker lost; a worker waits twice this for a reply
};

/// @brief The parameter server's communicator, roles and key ranges: one per run,
/// built by every rank (given).
class PsGroup {
 public:
  /// @brief Checks the options on every rank (before any communication, so a bad
  /// option throws on every rank), then duplicates `comm`. Collective over `comm`.
  /// @param[in] comm the ranks taking part; ranks [0, servers) are servers, the rest workers.
  /// @param[in] options the options.
  /// @param[in] key_sizes elements of each key (one per parameter tensor), each >= 1.
  /// @param[in] bounds the shard bounds (S + 1, as shard_keys() returns them); empty:
  ///            shard_keys(key_sizes, S) (your task A). The tests pass their own.
  /// @throws dtl::InvalidArgument naming `servers` (fewer than 1, or no worker left: one rank
  ///         has no parameter server; or more servers than keys), `staleness` (negative),
  ///         `timeout_seconds` (not positive), `key_sizes` (empty, or a size < 1) or `bounds`.
  PsGroup(MPI_Comm comm, PsOptions options, std::vector<std::int64_t> key_sizes, std::vector<int> bounds = {});

  /// @return the group's own communicator.
  const Comm& comm() const noexcept { return comm_; }
  /// @return the options.
  const PsOptions& options() const noexcept { return options_; }
  /// @return S.
  int servers() const noexcept { return options_.servers; }
  /// @return W = world size - S.
  int workers() const noexcept { return comm_.size() - options_.servers; }
  /// @return whether this rank is a server.
  bool is_server() const noexcept { return comm_.rank() < options_.servers; }
  /// @return this rank's worker index (rank - S), or -1 on a server.
  int worker_index() const noexcept { return is_server() ? -1 : comm_.rank() - options_.servers; }
  /// @return the elements of each key.
  const std::vector<std::int64_t>& key_sizes() const noexcept { return key_sizes_; }
  /// @return where each key starts in the model's flat buffer (keys + 1 offsets).
  const std::vector<std::int64_t>& key_offsets() const noexcept { return key_offsets_; }
  /// @return the shard bounds (the constructor's, or shard_keys()).
  const std::vector<int>& bounds() const noexcept { return bounds_; }

 private:
  Comm comm_;
  PsOptions options_;
  std::vector<std::int64_t> key_sizes_, key_offsets_;
  std::vector<int> bounds_;
};

/// @brief The message tags (Note [The protocol]).
enum Tag : int {
  kPush = 1,    ///< worker -> server: (key, step) + gradient
  kPull = 2,    ///< worker -> server: (key, clock)
  kClock = 3,   ///< worker -> server: (step) completed
  kDone = 4,    ///< worker -> server: nothing more will come
  kHeartbeat = 5,  ///< worker -> server: still here, waiting for a reply (Note [Silent workers])
  kReply = 16,  ///< server -> worker: kReply + key, the answer to a pull of key
};

/// @brief The status of a reply.
enum ReplyStatus : std::int32_t {
  kOk = 0,      ///< the values follow
  kFailed = 1,  ///< the step cannot complete (BSP lost a worker); an error text follows
};

/// @brief A decoded message: up to four integers, then floats or text.
struct Message {
  std::int32_t a = 0;  ///< kPush, kPull, reply: the key; kClock: the step
  std::int32_t b = 0;  ///< kPush: the step; kPull: the reader's clock; reply: the version
  std::int32_t c = 0;  ///< reply: the status (ReplyStatus)
  std::int32_t d = 0;  ///< unused (zero)
  std::vector<float> values;               ///< gradient or parameter values
  std::string text;                        ///< an error text (replies with kFailed)
};

/// @brief The bytes of a message: four int32 of header, then the floats, then the text (given).
/// @param[in] m the message.
/// @return its bytes (send them as MPI_BYTE).
std::vector<std::byte> encode(const Message& m);
/// @brief The message of `bytes` (given).
/// @param[in] bytes what encode() made.
/// @param[in] floats how many of the bytes after the header are floats (the rest is text).
/// @return the message.
/// @throws dtl::InvalidArgument if bytes is shorter than the header and the floats.
Message decode(std::span<const std::byte> bytes, std::size_t floats);

// ---------------------------------------------------------------------------
// Task A: sharding keys (shard.cc)
// ---------------------------------------------------------------------------

/// @brief Cuts keys into `servers` contiguous, non-empty ranges balanced by
/// element count (Note [Roles and keys]).
///
/// Greedy by prefix sums: range s ends at the first key boundary at or past
/// (s + 1) * total / S, but never so late that a later range would be left
/// without a key. Example: sizes {6, 2, 2, 6, 2, 2}, 2 servers: bounds {0, 3, 6}
/// (10 and 10 elements).
/// @param[in] key_sizes elements per key, each >= 1.
/// @param[in] servers S in [1, key_sizes.size()].
/// @return S + 1 bounds b, b[0] = 0, b[S] = keys, strictly increasing.
/// @throws dtl::InvalidArgument naming `servers` out of range or `key_sizes` (empty or a size < 1).
std::vector<int> shard_keys(std::span<const std::int64_t> key_sizes, int servers);

/// @brief The server that owns a key.
/// @param[in] bounds as shard_keys() returns them.
/// @param[in] key in [0, bounds.back()).
/// @return s with bounds[s] <= key < bounds[s + 1].
/// @throws dtl::InvalidArgument naming `key` out of range.
int server_of(std::span<const int> bounds, int key);

// ---------------------------------------------------------------------------
// Task B: the vector clock (clock.cc)
// ---------------------------------------------------------------------------

/// @brief A server's view of every worker's progress (Note [Vector clock]).
class VectorClock {
 public:
  /// @brief W clocks at 0, every worker live.
  /// @param[in] workers W >= 1.
  /// @throws dtl::InvalidArgument if workers < 1.
  explicit VectorClock(int workers);
  /// @brief Worker w completed one more step.
  /// @param[in] worker w in [0, W), live.
  /// @return its new clock.
  /// @throws dtl::InvalidArgument if w is out of range or lost.
  int tick(int worker);
  /// @brief Worker w is lost: it leaves the minimum.
  /// @param[in] worker w in [0, W).
  /// @throws dtl::InvalidArgument if w is out of range.
  void lose(int worker);
  /// @brief The slowest live worker's clock.
  /// @return min over live workers of clock[w]; the largest clock of all when none is live.
  int min() const;
  /// @brief Whether a worker at `clock` may be answered with version `version` under `model`
  /// (Note [Consistency models]): BSP version >= clock, SSP version >= clock - staleness, ASP always.
  /// @param[in] model the consistency model.
  /// @param[in] staleness s (SSP).
  /// @param[in] clock the reader's clock.
  /// @param[in] version the version the server has.
  /// @return whether the pull may be answered now.
  static bool may_read(Consistency model, int staleness, int clock, int version);
  /// @param[in] worker w. @return clock[w].
  int at(int worker) const { return clocks_.at(static_cast<std::size_t>(worker)); }
  /// @param[in] worker w. @return whether w is live.
  bool live(int worker) const { return !lost_.at(static_cast<std::size_t>(worker)); }
  /// @return W.
  int workers() const noexcept { return static_cast<int>(clocks_.size()); }
  /// @return every clock (checkpoints save them).
  const std::vector<int>& clocks() const noexcept { return clocks_; }
  /// @brief Sets every clock and liveness (checkpoints restore them).
  /// @param[in] clocks W clocks. @param[in] lost W flags.
  void assign(std::vector<int> clocks, std::vector<bool> lost) {
    clocks_ = std::move(clocks);
    lost_ = std::move(lost);
  }
  /// @return the lost flags.
  const std::vector<bool>& lost() const noexcept { return lost_; }

 private:
  std::vector<int> clocks_;
  std::vector<bool> lost_;
};

// ---------------------------------------------------------------------------
// Task C: the server (server.cc) and its checkpoints (task E, checkpoint.cc)
// ---------------------------------------------------------------------------

/// @brief What happened at a server, in order (the tests' event log).
enum class EventKind {
  kPush,   ///< a gradient arrived: worker, step = its step, key
  kClock,  ///< a clock arrived: worker, clock = the worker's new clock
  kPull,   ///< a pull was answered: worker, clock = the reader's clock, version, min_clock, key
  kApply,  ///< an update was applied: version = the version it made (ASP: worker = the pusher)
  kLost,   ///< a worker was presumed dead: worker, clock = its last clock
};

/// @brief One event of a server's log.
struct Event {
  EventKind kind = EventKind::kPush;  ///< what
  int worker = -1;                    ///< which worker (-1 for none)
  int clock = 0;                      ///< as EventKind says
  int version = 0;                    ///< the server's version (kPull: the one answered with)
  int min_clock = 0;                  ///< the vector clock's minimum at that moment
  int key = -1;                       ///< the key (kPush, kPull)
  int step = 0;                       ///< the step of a push
};

/// @brief What a server's run() ended with.
struct ServerReport {
  bool failed = false;        ///< BSP lost a worker: the steps from then on failed
  std::string error;          ///< why (the text the workers' StepFailed carries)
  std::vector<int> lost;      ///< the workers presumed dead, in the order they were found
  int version = 0;            ///< the final version
};

/// @brief A pull could not be answered: BSP lost a worker (Note [Silent workers]).
class StepFailed : public Error {
 public:
  using Error::Error;
};

/// @brief One server: holds keys [bounds[s], bounds[s+1]) and serves the workers.
class ParameterServer {
 public:
  /// @brief A server with the initial values of its keys.
  /// @param[in] group the group; this rank must be a server.
  /// @param[in] initial the whole model's flat values (every key, key_offsets() order);
  ///            the server copies its own range.
  /// @throws dtl::InvalidArgument if this rank is a worker or `initial` has the wrong size.
  ParameterServer(const PsGroup& group, std::span<const float> initial);

  /// @brief Serves until every worker is done or lost (Note [The protocol]).
  /// @return the report (failed and its error when BSP lost a worker).
  /// @throws dtl::Error on a malformed message (naming the sender and tag).
  ServerReport run();

  /// @return this server's values (its keys, in order).
  std::span<const float> values() const noexcept { return values_; }
  /// @return this server's version (steps applied; ASP: the vector clock's minimum).
  int version() const noexcept { return version_; }
  /// @return the vector clock.
  const VectorClock& clock() const noexcept { return clock_; }
  /// @return the event log, in order.
  const std::vector<Event>& events() const noexcept { return events_; }

  /// @brief The server's state as bytes (Note [Checkpoints]); call between runs.
  /// @return the bytes.
  std::vector<std::byte> checkpoint() const;
  /// @brief Puts back a state checkpoint() made.
  /// @param[in] bytes the checkpoint.
  /// @throws dtl::InvalidArgument naming `bytes` if they are not a checkpoint of this
  ///         server's key range (wrong size, wrong keys, wrong worker count).
  void restore(std::span<const std::byte> bytes);

 private:
  struct Pending {  // a deferred pull
    int worker = 0, key = 0, clock = 0;
  };
  void handle(int source, int tag, std::span<const std::byte> bytes);
  void on_push(int worker, const Message& m);
  void on_clock(int worker, const Message& m);
  void on_pull(int worker, const Message& m);
  void apply_ready_steps();
  void answer_ready_pulls();
  void find_lost_workers(double now);
  void reply(int worker, int key, int clock);
  void reply_failed(int worker, int key, const std::string& why);
  void lose(int worker, double silent_seconds);
  void send(int worker, int tag, std::vector<std::byte> bytes);
  void complete_sends();
  bool waiting_here(int worker) const;

  const PsGroup* group_;
  int server_ = 0;           // s
  int first_key_ = 0, end_key_ = 0;
  std::int64_t base_ = 0;    // offset of our first key in the flat buffer
  std::vector<float> values_;
  std::vector<nn::Sgd> sgd_;  // one per key
  VectorClock clock_;
  int version_ = 0;
  // BSP/SSP: the gradients of step t (pending_[t - version_]), per worker our whole range.
  std::vector<std::vector<std::vector<float>>> pending_;
  std::vector<Pending> deferred_;
  std::vector<double> last_heard_;
  std::vector<bool> done_;
  ServerReport report_;
  std::vector<Event> events_;
  std::vector<MPI_Request> send_requests_;
  std::vector<std::vector<std::byte>> send_buffers_;
};

// ---------------------------------------------------------------------------
// Task D: the worker (worker.cc)
// ---------------------------------------------------------------------------

/// @brief One worker's side of the protocol. push() and pull() may be called
/// from several threads at once (the dependency engine's), on different keys.
class WorkerClient {
 public:
  /// @brief A client at clock `start_clock`.
  /// @param[in] group the group; this rank must be a worker.
  /// @param[in] start_clock the steps already done (0, or a restored server's clock).
  /// @throws dtl::InvalidArgument if this rank is a server or start_clock < 0.
  explicit WorkerClient(const PsGroup& group, int start_clock = 0);
  /// @brief Completes what it sent (up to the timeout), then frees it.
  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  /// @brief Sends the gradient of `key` for the current step (clock()) to the key's server.
  /// Does not wait: the gradient is copied.
  /// @param[in] key in [0, keys).
  /// @param[in] grad key_sizes()[key] floats.
  /// @throws dtl::InvalidArgument naming `key` or `grad`.
  void push(int key, std::span<const float> grad);
  /// @brief Asks the key's server for its values and waits for the answer.
  /// @param[in] key in [0, keys).
  /// @param[out] out key_sizes()[key] floats.
  /// @return the version answered with.
  /// While it waits it sends a kHeartbeat to every server every timeout / 4 seconds.
  /// @throws dtl::InvalidArgument naming `key` or `out`; StepFailed if the server answers
  ///         kFailed (its text); dtl::TimeoutError naming the server, key and clock after
  ///         2 * PsOptions::timeout_seconds without an answer (Note [Silent workers]).
  int pull(int key, std::span<float> out);
  /// @brief Ends the current step: kClock to every server, then clock() + 1.
  void clock();
  /// @brief Tells every server this worker is done and completes every send.
  /// @throws dtl::TimeoutError naming the server if a send does not complete in time.
  void finish();
  /// @return the steps completed (the clock).
  int clock_value() const noexcept { return clock_; }
  /// @return the group.
  const PsGroup& group() const noexcept { return *group_; }

 private:
  void send(int dest, int tag, std::vector<std::byte> bytes);
  const PsGroup* group_;
  int clock_ = 0;
  bool finished_ = false;
  struct Impl;
  Impl* impl_;  // the sends in flight, behind a mutex (worker.cc)
};

/// @brief How a worker trains (train_worker()).
struct TrainOptions {
  int steps = 1;                 ///< steps to run
  double delay_seconds = 0.0;    ///< a straggler: sleep this long in every step, after the backward
  int silent_from_step = -1;     ///< fault injection: from this step on, send nothing (Note [Silent workers])
  bool overlap = true;           ///< pull through the dependency engine, overlapping forward (Task F)
  int threads = 2;               ///< the engine's threads when overlap is set
};

/// @brief Fills the batch of one step: x and y as the model and SoftmaxCrossEntropy want them.
using BatchFn = std::function<void(int step, nn::Tensor& x, nn::Tensor& y)>;

/// @brief What a worker's training did.
struct TrainReport {
  std::vector<double> losses;   ///< the loss of each completed step
  std::vector<int> versions;    ///< per completed step, the smallest version it pulled
  int steps_done = 0;           ///< steps completed (pushed and clocked)
  std::string error;            ///< empty, or what stopped it (a StepFailed's text)
};

/// @brief Trains on the parameter server: per step pull every key (through the
/// engine when options.overlap: the pull of key k runs while earlier units
/// compute, and each unit's forward waits for its own keys), forward, loss,
/// backward, the straggler's delay, push every key, clock(); finish() at the end
/// (also after an error; not when silent).
/// @param[in] client this worker's client.
/// @param[in,out] model the model, flattened or not; its values are overwritten by pulls.
/// @param[in] batch fills each step's batch.
/// @param[in] options the options.
/// @return the report (a StepFailed ends training and is reported, not thrown).
/// @throws dtl::TimeoutError and other errors than StepFailed.
TrainReport train_worker(WorkerClient& client, nn::Model& model, const BatchFn& batch, const TrainOptions& options);

}  // namespace dtl::lab09
