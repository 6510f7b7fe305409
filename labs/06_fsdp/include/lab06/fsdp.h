/// @file
/// @brief Lab 06 — FSDP and ZeRO: the API you implement in src/.
///
/// Data parallelism (lab 04) keeps a full copy of the parameters, the gradients
/// and the optimizer state on every rank: 16 bytes per parameter with AdamW, W
/// times over. ZeRO ("zero redundancy") and FSDP ("fully sharded data
/// parallel") cut each of those copies into W shards and keep only one per rank.
/// This lab builds the three stages as three modes of one design, on the
/// training core (harness/nn) and the Communicator interface (harness/comm):
///
///   - Task A (flat_layout.cc): the arithmetic of a **FlatParameter** — a unit's
///     parameters laid end to end, zero-padded to a multiple of W, rank r owning
///     the r-th slice (make_flat_layout()); and which slices of an old sharding
///     make up a new one, for loading a checkpoint on another world size
///     (reshard_sources());
///   - Task B (sharded_trainer.cc): the ShardedTrainer — per unit a FlatParameter,
///     this rank's shard and optimizer state for the shard only; gradients
///     reduce-scattered after each unit's backward; the optimizer steps the local
///     shard; ZeRO-1 (optimizer state sharded) and ZeRO-2 (+ gradients sharded);
///     the sharded loss scaler of fp16;
///   - Task C (fsdp_gather.cc): FSDP / ZeRO-3 (+ parameters sharded): all-gather a
///     unit's parameters before its forward and again before its backward, free
///     them after; prefetch the next units' gathers with a limit on how many are
///     in flight; 16-bit gathers for mixed precision;
///   - Task D (checkpoint.cc): sharded checkpoints — each rank writes its shard;
///     loading re-shards for another world size, or refuses, naming the file, the
///     unit and the rank, and changes nothing;
///   - Task E (offload.cc): CPU offload — the shards and the optimizer state in
///     host memory, copied in before each gather and out after each
///     reduce-scatter; the optimizer steps on the host.
///
/// and, given (labs/06_fsdp/given/, compiled into both builds, not yours to edit):
///   - shard_files.cc  the checkpoint file format (ShardFile, Manifest: write,
///                     read, checksum) and agree_or_throw().
///
/// See Note [FlatParameter], Note [ZeRO stages], Note [Reduce-scatter, not
/// allreduce], Note [Gather and free], Note [Prefetch and the rate limiter],
/// Note [Mixed precision in FSDP], Note [CPU offload] and Note [Sharded checkpoints] below; the
/// handout and the slides refer to them by name.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/nn/tensor.h"

namespace dtl::lab06 {

// Note [FlatParameter]
// ~~~~~~~~~~~~~~~~~~~~
// A unit (harness/nn's "embed", "block0", ..., "head") has a handful of
// parameters of odd sizes. FSDP lays them end to end in one flat buffer, the
// unit's FlatParameter, and rebinds every Parameter to a view of it
// (nn::flatten_values(unit params, W)): parameter i starts at offset_i = the sum
// of the earlier numels. The buffer is padded with zeros to `padded`, the next
// multiple of the world size W, so that it splits into W equal shards of
// `shard` = padded / W elements; rank r owns [r * shard, (r + 1) * shard).
// Equal shards are what reduce_scatter and allgather move (P blocks of one
// count), and they make every rank's memory the same. Example, numels {3, 5, 2}
// at W = 4:
//
//     flat   p0 p0 p0 | p1 p1 p1 p1 p1 | p2 p2 | 0 0      numel 10, padded 12
//     shard  [ rank 0 ][ rank 1 ][ rank 2 ][ rank 3 ]     shard 3
//
// A shard may start or end inside a parameter (rank 1 holds p1[0..3), rank 2
// holds p1[3..5) and p2[0], rank 3 p2[1] and the padding): the optimizer does
// not care, because its step is elementwise (harness/nn/optim.h). The
// padding costs at most W - 1 elements per unit and is always zero: its
// gradient is zero, so SGD and AdamW leave it at zero.

// Note [ZeRO stages]
// ~~~~~~~~~~~~~~~~~~
// Per parameter, with AdamW in fp32 (lab 05's table): 4 bytes of value, 4 of
// gradient, 8 of optimizer state (m, v). With N the padded parameter count of
// the model (the sum over units), S = N / W and L the largest unit's padded
// count, the bytes each rank holds at its peak:
//
//     mode     what is sharded            parameters    gradients     optimizer
//     DDP      nothing                    4N            4N            8N
//     ZeRO-1   optimizer state            4N            4N            8S
//     ZeRO-2   + gradients                4N            4S + 4L       8S
//     FSDP     + parameters (ZeRO-3)      4S + 4L       4S + 4L       8S
//
// (SGD with momentum: 4 bytes of state, not 8; without momentum none.) The 4L
// terms are the one unit whose full gradient (ZeRO-2, FSDP) or full parameters
// (FSDP) exist at a time, when nothing is prefetched (prefetch = 0); with
// prefetch = k, up to 1 + k units do, so the bound is 4S + 4(1 + k)L. The
// MemoryTracker measures all of it exactly and the tests compare it with the
// table. The communication per step, per rank, in bytes of the buffers the
// Communicator sees (4N each way):
//
//     DDP      allreduce 4N                          (an allreduce is a reduce-scatter + an allgather)
//     ZeRO-1/2 reduce_scatter 4N + allgather 4N      the same bytes as DDP
//     FSDP     reduce_scatter 4N + 2 x allgather 4N  1.5 times DDP: the price of not keeping the parameters

// Note [Reduce-scatter, not allreduce]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// After a unit's backward, every rank holds a full gradient of the unit from
// its own rows. The optimizer of rank r needs only the averaged gradient of its
// own shard. An allreduce would give every rank the whole average and then throw
// away (W - 1)/W of it: a ring allreduce *is* a reduce-scatter followed by an
// allgather (lab 03), so stopping after the reduce-scatter moves half the bytes
// and needs only a shard-sized result buffer — which is how ZeRO-2 and FSDP can
// free the full gradient right after. The parameters are brought back to full
// size by the allgather half: ZeRO-1/2 after the optimizer step, FSDP before
// each use. No allreduce appears in any mode (the tests count them); the only
// exception is the one-int found-inf flag of fp16's loss scaler.

// Note [Gather and free]
// ~~~~~~~~~~~~~~~~~~~~~~
// FSDP keeps only the shard of each unit between uses. The full FlatParameter's
// storage is released (nn::Storage::release(): the views stay bound, any read
// throws) and allocated again for each use; the hooks of harness/nn's Model
// give the places:
//
//     pre_forward(u)    all-gather unit u's shards into its full buffer, wait
//     post_forward(u)   free the full buffer (the peers' parts and our own copy of our shard)
//     pre_backward(u)   all-gather again (backward needs the weights: dx = dy W)
//     post_backward(u)  reduce-scatter the unit's full gradient into the gradient
//                       shard (ReduceOp::kAvg), free the full gradient and the full parameters
//
// The full gradient of unit u is allocated (zeroed) in pre_backward(u): no
// zero_grad() is needed, and nothing of it lives outside the unit's backward.
// ZeRO-2 does the gradient half of this (its parameters stay full); ZeRO-1
// neither (its reduce-scatter writes the average into its own block of the
// persistent full gradient, in place).

// Note [Prefetch and the rate limiter]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without prefetch each all-gather is issued when its unit is needed, and the
// unit waits for it: the communication is fully exposed. With prefetch = k,
// pre_forward(u) also issues the gathers of units u+1 .. u+k (pre_backward(u):
// u-1 .. u-k), so they travel while unit u computes, and the next unit usually
// finds its parameters there. Each issued gather allocates the unit's full
// buffer, so the number of units that are gathered or being gathered at once is
// limited to 1 + k: the rate limiter. Without it, a fast CPU issues every gather
// of the model at once and FSDP's memory becomes DDP's. The same limit applies
// to reduce-scatters: at most k in flight (0: each is waited for as soon as it is
// issued); the oldest is waited for, and its full gradient freed, before another
// is issued. The Communicator runs operations in issue order (FIFO), so a
// prefetched gather never overtakes the reduce-scatter issued before it.

// Note [Mixed precision in FSDP]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's FSDP MixedPrecision(param_dtype=bf16, reduce_dtype=fp32): the fp32
// shard is the master copy that the optimizer steps; for each gather it is
// rounded to 16 bits into a send buffer, the all-gather moves 16-bit elements
// (half the bytes), and the received full unit is widened into the fp32 buffer
// the layers read (harness/nn computes in fp32: lab 05's Note [Compute copies]).
// The two 16-bit buffers are transient and charged to kCommunication. The
// gradients of the unit are rounded to the 16-bit type (what a 16-bit backward
// produces) and reduce-scattered in fp32 (reduce_dtype). fp16 needs loss
// scaling (lab 05's Note [Loss scaling]), and here it has a twist: after the
// reduce-scatter each rank sees only its own shard of the gradient, so an
// overflow (an inf) shows on one rank only. The **sharded grad scaler** sums a
// one-int found-inf flag over the ranks before deciding to skip, so every rank
// skips the same steps; on a skip the scale halves.

// Note [CPU offload]
// ~~~~~~~~~~~~~~~~~~
// With AdamW, FSDP still keeps 16S bytes per rank between steps: the 4S master
// shard, the 4S gradient shard and 8S of m and v. CPU offload (PyTorch FSDP's
// CPUOffload; the idea of ZeRO-Offload) moves all of it to host memory, which
// is far larger than a GPU's, and leaves on the compute device only what a unit
// needs while it runs. With ShardedOptions::offload, per unit (S_u = its shard,
// L_u = its padded size):
//
//     buffer        compute device                  host (Device::kPinnedHost)
//     shard         -                               4 S_u, the fp32 master copy
//     grad_shard    -                               4 S_u
//     optimizer     -                               8 S_u (AdamW), stepped by the CPU
//     full_values   4 L_u, around each use          -
//     full_grads    4 L_u, in the unit's backward   -
//
// The data crosses the host-device link (PCIe) at two places. Before each
// gather, the host shard is copied into this rank's own slice of the freshly
// allocated full buffer (host to device, 4 S_u bytes) and the all-gather runs in
// place, sending from that slice. The reduce-scatter writes the averaged shard
// into this rank's slice of the full gradient, which is copied into the host's
// grad_shard (device to host, 4 S_u) before the full gradient is freed. Per
// step that is 8S host-to-device (the forward and the backward gathers) and 4S
// device-to-host: StepResult counts both. No collective ever reads or writes
// host memory (NCCL moves device buffers only). The price is the link (PCIe 4.0
// x16 peaks near 32 GB/s each way, an NVLink many times that) and an optimizer
// step on the CPU; page-locked ("pinned") host memory is what lets the copies
// run at the link's speed and overlap with compute. Here the layers compute on
// the CPU (harness/nn), so the compute device is Device::kCpu and the host side
// is Device::kPinnedHost (cudaMallocHost in a CUDA build with a GPU, ordinary
// memory otherwise): each has its own MemoryTracker, which is how the tests see
// where every byte lives. ZeRO-1/2 keep full parameters on the device and take
// no offload here. With prefetch k the device holds 1 + k consecutive units at
// most: its peaks are 4 W_k(L) bytes of parameters and as many of gradients,
// W_k(L) being the largest sum of the padded sizes of 1 + k consecutive units
// (<= (1 + k) L), plus 2 W_k(S + L) of communication buffers with 16-bit gathers.
// A checkpoint does not record where the shards lived: load_checkpoint() fills
// the host tensors in place, with or without offload on either side.

// Note [Sharded checkpoints]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each rank writes its own file, shard-R-of-W.dtl, with its shard of every unit
// (the fp32 values and the optimizer state: SGD's momentum, AdamW's m and v) and
// the optimizer's step count; rank 0 also writes manifest.dtl (the world size,
// the step count, each unit's name and real element count). No rank ever holds
// the whole model: that is the point of sharding. To load on W' ranks, rank r'
// needs the real elements [r' S', (r' + 1) S') of each unit (S' its new shard
// size); they lie in one or more old shards, and reshard_sources() says which
// slices. Each file holds its shards as the trainer holds them, padding
// included (UnitShard::values is `shard` floats, and the last ranks' end in
// zeros); a load copies only real elements, so the old padding is never read
// and the new shards' padding is zero whatever W was. Everything is read and checked
// into temporary buffers first; the ranks then agree (agree_or_throw()) and only
// if every rank succeeded is the trainer's state replaced. A missing or corrupt
// file, a unit that is not in the model, a different element count, or a file
// that claims another rank or world size makes every rank throw
// CheckpointError naming the file, the unit and the rank — and the trainer keeps
// the state it had. The writes go to a temporary name and are renamed at the
// end, so a crash during a save never destroys the previous checkpoint.

// ---------------------------------------------------------------------------
// Task A: the FlatParameter's layout (flat_layout.cc)
// ---------------------------------------------------------------------------

/// @brief Where a unit's parameters sit in its FlatParameter, and how it is sharded (Note [FlatParameter]).
struct FlatLayout {
  std::vector<std::int64_t> numels;   ///< each parameter's element count, in forward order
  std::vector<std::int64_t> offsets;  ///< parameter i starts at offsets[i]; offsets[0] = 0
  std::int64_t numel = 0;             ///< real elements: the sum of numels
  std::int64_t padded = 0;            ///< numel rounded up to a multiple of world_size (0 when numel is 0)
  std::int64_t shard = 0;             ///< padded / world_size: every rank's shard size
  int world_size = 1;                 ///< W
  /// @brief The first element of rank r's shard in the flat buffer.
  /// @param[in] rank r.
  /// @return r * shard.
  std::int64_t shard_begin(int rank) const noexcept { return static_cast<std::int64_t>(rank) * shard; }
};

/// @brief The layout of a FlatParameter of parameters with these element counts, sharded W ways.
///
/// Example: numels {3, 5, 2}, W = 4: offsets {0, 3, 8}, numel 10, padded 12, shard 3.
/// @param[in] numels each parameter's element count (>= 0), in forward order.
/// @param[in] world_size W >= 1.
/// @return the layout.
/// @throws dtl::InvalidArgument if world_size < 1 or a count is negative.
FlatLayout make_flat_layout(std::span<const std::int64_t> numels, int world_size);

/// @brief One slice to copy when re-sharding: `count` elements from old shard
/// `old_rank` at `old_offset` (within that shard) to `new_offset` within the new shard.
struct ShardSource {
  int old_rank = 0;             ///< whose file holds them
  std::int64_t old_offset = 0;  ///< first element, relative to that old shard
  std::int64_t new_offset = 0;  ///< where it goes, relative to the new shard
  std::int64_t count = 0;       ///< elements, > 0
};

/// @brief Which slices of an old W-way sharding make up rank `new_rank`'s shard of a new W'-way one.
///
/// Only real elements [0, numel) are copied: the new shard is [new_rank * S',
/// (new_rank + 1) * S') with S' = ceil(numel / W') (the layout's shard), its
/// part below numel is covered by the returned slices in increasing order
/// without gaps or overlaps, and the rest is padding (zero, nothing to copy).
/// Example: numel 10, W = 4 (shard 3), W' = 3 (shard 4), new rank 1 (elements
/// 4..7): {old 1, offset 1, new 0, count 2}, {old 2, offset 0, new 2, count 2}.
/// @param[in] numel the unit's real element count (>= 0).
/// @param[in] old_world_size W >= 1 (the sharding that was saved).
/// @param[in] new_world_size W' >= 1.
/// @param[in] new_rank in [0, W').
/// @return the slices, in increasing new_offset; empty when the new shard is all padding.
/// @throws dtl::InvalidArgument on a negative numel, a world size < 1 or a rank out of range.
std::vector<ShardSource> reshard_sources(std::int64_t numel, int old_world_size, int new_world_size, int new_rank);

// ---------------------------------------------------------------------------
// Task B and C: the sharded trainer (sharded_trainer.cc, fsdp_gather.cc)
// ---------------------------------------------------------------------------

/// @brief What is sharded (Note [ZeRO stages]).
enum class ShardingMode {
  kZero1,  ///< optimizer state sharded; parameters and gradients full
  kZero2,  ///< optimizer state and gradients sharded; parameters full
  kFsdp,   ///< everything sharded: ZeRO-3, parameters gathered per unit around its forward and backward
};

/// @brief The mode's name.
/// @param[in] mode the mode.
/// @return "zero1", "zero2" or "fsdp".
const char* sharding_mode_name(ShardingMode mode);

/// @brief Which optimizer steps the shards.
enum class OptimizerKind {
  kSgd,    ///< nn::Sgd (state: momentum, 4 bytes per element when momentum > 0)
  kAdamW,  ///< nn::AdamW (state: m and v, 8 bytes per element)
};

/// @brief How a ShardedTrainer is set up.
struct ShardedOptions {
  ShardingMode mode = ShardingMode::kFsdp;          ///< what is sharded
  OptimizerKind optimizer = OptimizerKind::kAdamW;  ///< the optimizer of every shard
  nn::SgdOptions sgd{};                             ///< used when optimizer is kSgd
  nn::AdamWOptions adamw{};                         ///< used when optimizer is kAdamW
  /// Gathers issued ahead of the unit that needs them, and reduce-scatters left in
  /// flight (Note [Prefetch and the rate limiter]); 0: every operation is waited for
  /// as soon as it is issued. >= 0.
  int prefetch = 0;
  /// FSDP only: the element type of the gathered parameters (kF32, kBF16 or kF16;
  /// Note [Mixed precision in FSDP]). ZeRO-1/2 take kF32 only.
  nn::DType param_dtype = nn::DType::kF32;
  /// The initial loss scale of fp16 (param_dtype kF16): backward sees dL/dlogits *
  /// scale and the gradient shards are unscaled (times 1/scale) before the step; a step
  /// with an inf or NaN on any rank is skipped and the scale halves. It never grows back
  /// (lab 05's dynamic scaler does; this one only backs off). > 0, finite; must be 1
  /// for kF32 and kBF16, which neither scale nor unscale (anything else is refused).
  float loss_scale = 1.0f;
  /// FSDP only: keep every unit's shard, gradient shard and optimizer state in host
  /// memory (Device::kPinnedHost) and copy across around each gather and reduce-scatter
  /// (Note [CPU offload]). false: everything on the compute device (Device::kCpu).
  bool offload = false;
  /// The largest full unit, in bytes of its padded fp32 FlatParameter, that this rank
  /// may materialize; a larger unit is refused in the constructor, naming it. 0: no limit.
  std::int64_t max_unit_bytes = 0;
  /// If not empty, one layout per unit, as make_flat_layout(unit numels, W) returns it,
  /// used instead of calling make_flat_layout() (the grading tests of tasks B-D give
  /// them explicitly, so a fault in task A costs task A's items only).
  std::vector<FlatLayout> layouts;
  /// If set, the trainer adds spans to it: track "compute" (each unit's forward and
  /// backward, the optimizer) and track "comm" (each gather and reduce-scatter, when waited for).
  Timeline* timeline = nullptr;
  /// If set, called after each phase of a unit with ("pre_forward" | "post_forward" |
  /// "pre_backward" | "post_backward", unit) once that hook's work is done, and
  /// ("step", -1) after the optimizer: the benchmark samples the MemoryTracker there.
  std::function<void(const char* phase, int unit)> observer;
};

/// @brief What one ShardedTrainer::step() did.
struct StepResult {
  double loss = 0.0;                     ///< this rank's mean loss over its rows (no communication)
  bool skipped = false;                  ///< fp16: some rank's gradient shard held an inf/NaN, nothing moved
  float scale = 1.0f;                    ///< the loss scale this step's backward used
  int allgathers = 0;                    ///< all-gathers this rank issued in the step
  int reduce_scatters = 0;               ///< reduce-scatters this rank issued in the step
  std::int64_t allgather_bytes = 0;      ///< their full (output) buffers' bytes, summed
  std::int64_t reduce_scatter_bytes = 0; ///< their full (input) buffers' bytes, summed
  double exposed_seconds = 0.0;          ///< time spent waiting for gathers and reduce-scatters
  int max_in_flight = 0;                 ///< the most gathers issued and not yet waited for, at once
  std::int64_t host_to_device_bytes = 0; ///< offload: shard bytes copied to the compute device (8S per step)
  std::int64_t device_to_host_bytes = 0; ///< offload: gradient-shard bytes copied to the host (4S per step)
};

/// @brief One unit's sharded state: its layout, buffers, optimizer and operations in flight.
///
/// The trainer owns one per unit; the tests and the checkpoint code read it.
struct UnitState {
  std::string name;           ///< the unit's name
  FlatLayout layout;          ///< Note [FlatParameter]
  /// The full FlatParameter (f32, `padded` elements, kParameters). The unit's
  /// Parameters are views of it. ZeRO-1/2: always allocated. FSDP: allocated only
  /// while gathered (storage()->is_allocated()).
  nn::Tensor full_values;
  /// The full gradient (f32, `padded`, kGradients). ZeRO-1: always allocated.
  /// ZeRO-2 and FSDP: allocated from pre_backward until its reduce-scatter completed.
  nn::Tensor full_grads;
  /// This rank's shard of the values (f32, `shard` elements): the master copy the
  /// optimizer steps. ZeRO-1/2: a view of full_values; FSDP: its own storage
  /// (kParameters) on ShardedTrainer::state_device().
  nn::Tensor shard;
  /// This rank's averaged gradient shard (f32, `shard`). ZeRO-1: a view of full_grads;
  /// ZeRO-2 and FSDP: its own storage (kGradients) on ShardedTrainer::state_device().
  nn::Tensor grad_shard;
  /// FSDP with a 16-bit param_dtype: the rounded shard to send (kCommunication),
  /// allocated only while a gather is in flight.
  nn::Tensor half_shard;
  /// FSDP with a 16-bit param_dtype: the 16-bit full unit received (kCommunication),
  /// allocated only while a gather is in flight.
  nn::Tensor half_full;
  std::unique_ptr<nn::Sgd> sgd;      ///< the shard's optimizer (kSgd)
  std::unique_ptr<nn::AdamW> adamw;  ///< the shard's optimizer (kAdamW)
  Work gather;                       ///< FSDP: its all-gather, from issue until waited for
  bool gather_issued = false;        ///< FSDP: gathered or being gathered (full_values allocated)
  Work reduce;                       ///< its reduce-scatter, from issue until waited for
  bool reduce_issued = false;        ///< a reduce-scatter was issued and not yet waited for
};

/// @brief ZeRO-1, ZeRO-2 and FSDP over one model (Note [ZeRO stages]).
///
/// Set-up (constructor): per unit, the FlatParameter of its values (padded to a
/// multiple of W; nn::flatten_values(unit params, W)) and of its gradients; rank
/// 0's values broadcast to every rank; this rank's shard, the shard's optimizer,
/// and, for ZeRO-2/FSDP, a gradient shard; then the buffers the mode does not keep
/// are released. The model's hooks are installed. One step:
///
///     forward                  FSDP: gather before, free after each unit (task C)
///     backward x loss_scale    after each unit: reduce-scatter (kAvg) its gradient
///                              into the shard (ZeRO-2/FSDP: free the full gradient)
///     wait for every reduce-scatter
///     fp16: unscale, found-inf agreed by every rank; skip everything below if so
///     optimizer.step(shard, grad_shard) per unit
///     ZeRO-1/2: all-gather every unit's values in place (FSDP gathers at the next forward)
///
/// Every rank must construct its trainer together and call step() together.
class ShardedTrainer {
 public:
  /// @brief Builds the FlatParameters, shards and optimizers; installs the hooks.
  ///
  /// Collective over `backend` (a broadcast per unit).
  /// @param[in] backend the ranks; must outlive the trainer.
  /// @param[in,out] model an f32 model that was not flattened; must outlive the trainer;
  ///            its hooks are replaced.
  /// @param[in] options mode, optimizer, prefetch, precision, limits.
  /// @throws dtl::InvalidArgument naming the argument, the unit and the rank: an f64 or
  ///         flattened model, prefetch < 0, a 16-bit param_dtype or offload outside FSDP, a
  ///         loss_scale that is not finite and > 0 (or not 1 outside fp16), a unit above
  ///         max_unit_bytes, or layouts that do not match the units.
  ShardedTrainer(Communicator& backend, nn::Model& model, ShardedOptions options);
  /// @brief Removes the hooks and waits for anything in flight (errors printed, not thrown).
  ~ShardedTrainer();
  ShardedTrainer(const ShardedTrainer&) = delete;
  ShardedTrainer& operator=(const ShardedTrainer&) = delete;

  /// @brief One training step on this rank's rows (see the class comment).
  ///
  /// Collective: every rank must call it, once per step.
  /// @param[in] x this rank's inputs (MLP: (B, in) f32; GPT: (B, T) i32).
  /// @param[in] targets this rank's targets.
  /// @return the loss, whether the step was skipped, the communication counts.
  StepResult step(const nn::Tensor& x, const nn::Tensor& targets);

  /// @return the number of units.
  int unit_count() const noexcept { return static_cast<int>(units_.size()); }
  /// @param[in] u a unit index. @return its state.
  UnitState& unit(int u) { return units_.at(static_cast<std::size_t>(u)); }
  /// @param[in] u a unit index. @return its state.
  const UnitState& unit(int u) const { return units_.at(static_cast<std::size_t>(u)); }
  /// @return the loss scale of the next step.
  float loss_scale() const noexcept { return scale_; }
  /// @return optimizer steps taken (skipped steps do not count).
  std::int64_t steps() const noexcept { return steps_; }
  /// @return the options.
  const ShardedOptions& options() const noexcept { return options_; }
  /// @return the communicator.
  Communicator& backend() noexcept { return backend_; }
  /// @return the model.
  nn::Model& model() noexcept { return model_; }
  /// @brief Where the shards and the optimizer state live (Note [CPU offload]).
  /// @return Device::kPinnedHost with options().offload, else compute_device().
  nn::Device state_device() const noexcept { return options_.offload ? nn::Device::kPinnedHost : compute_device_; }
  /// @brief Where the model computes: Device::kCpu, or Device::kCuda for a model moved
  /// to the GPU before the trainer was made (the handout's "On a GPU").
  /// @return the device of the model's parameters.
  nn::Device compute_device() const noexcept { return compute_device_; }

  /// @brief Replaces the optimizer step count (a checkpoint's). Every shard's optimizer follows it.
  /// @param[in] steps >= 0.
  void set_steps(std::int64_t steps);

 private:
  // Task B (sharded_trainer.cc): the gradient side, shared by every mode.
  void before_backward_grads(int u);  // allocate (ZeRO-2/FSDP) or zero the full gradient
  void after_backward_grads(int u);   // round (16-bit), reduce-scatter, free under the limit
  void wait_reduce(int u);            // wait for unit u's reduce-scatter; free its full gradient (ZeRO-2/FSDP)
  void optimizer_step();              // every unit's shard
  // Task C (fsdp_gather.cc): the parameter side of FSDP.
  void issue_gather(int u);                  // allocate and start unit u's all-gather
  void wait_gather(int u);                   // wait; widen 16-bit; free the 16-bit buffers
  void free_params(int u);                   // release unit u's full values
  void gather_for_use(int u, int direction); // issue u (if needed) and prefetch u+d.. under the limit; wait u
  // Task E (offload.cc): the copies of CPU offload.
  void upload_shard(int u);         // host shard -> this rank's slice of full_values
  void download_grad_shard(int u);  // this rank's slice of full_grads -> host grad_shard
  // Both.
  double wait_timed(Work& work, const std::string& what);  // waits, adds to exposed time and timeline

  Communicator& backend_;
  nn::Model& model_;
  ShardedOptions options_;
  std::vector<UnitState> units_;
  std::vector<int> reduce_order_;  // units whose reduce-scatter is in flight, oldest first
  float scale_ = 1.0f;
  nn::Device compute_device_ = nn::Device::kCpu;  // the model's parameters' device
  std::int64_t steps_ = 0;
  StepResult current_;            // the step being run (counts)
  int in_flight_ = 0;             // gathers issued and not yet waited for
  double compute_begin_ = 0.0;    // when the running unit's forward or backward began (the timeline)
  nn::SoftmaxCrossEntropy loss_;
};

// ---------------------------------------------------------------------------
// Task D: sharded checkpoints (checkpoint.cc)
// ---------------------------------------------------------------------------

/// @brief A checkpoint that cannot be read or does not fit the trainer (Note [Sharded checkpoints]).
class CheckpointError : public Error {
 public:
  /// @brief The error.
  /// @param[in] message what, naming the file, the unit and the rank.
  explicit CheckpointError(const std::string& message) : Error(message) {}
};

/// @brief Writes this rank's shard of every unit to `dir`/shard-R-of-W.dtl, and
/// rank 0 the manifest (Note [Sharded checkpoints]).
///
/// Collective over trainer.backend(): every rank writes, then the ranks agree
/// (agree_or_throw()), so either every rank returns or every rank throws.
/// @param[in] trainer the trainer (nothing in flight: between steps).
/// @param[in] dir an existing folder, writable.
/// @throws CheckpointError on every rank if any rank could not write, naming its file and rank.
void save_checkpoint(ShardedTrainer& trainer, const std::string& dir);

/// @brief Loads a checkpoint written by save_checkpoint() at any world size into
/// `trainer`, re-sharding for this trainer's world size (reshard_sources()).
///
/// Collective over trainer.backend(). Every rank reads the manifest and the old
/// shard files it needs, checks them, and builds its new shards and optimizer
/// state aside; the ranks agree; only then does every rank replace its state.
/// @param[in,out] trainer a trainer of the same model (unit names and counts),
///            optimizer and options; any world size.
/// @param[in] dir the folder save_checkpoint() wrote.
/// @throws CheckpointError on every rank, naming the file, unit and rank, if a
///         file is missing or corrupt, a unit is missing or has another element
///         count, the optimizer differs, or a file claims another rank or world
///         size; the trainer is then unchanged. The message holds "rank", the file's
///         name (e.g. "shard-0-of-3"), "missing" or "corrupt" for those two cases,
///         and both values where two disagree (both world sizes, both element counts).
void load_checkpoint(ShardedTrainer& trainer, const std::string& dir);

// ---------------------------------------------------------------------------
// The file format and the agreement (shard_files.cc, given)
// ---------------------------------------------------------------------------

/// @brief One unit's shard as stored: its values and the optimizer state, `shard` floats each.
struct UnitShard {
  std::string name;                       ///< the unit's name
  std::int64_t numel = 0;                 ///< the unit's real element count (not padded)
  std::vector<float> values;              ///< this rank's shard of the values (`shard` floats)
  std::vector<std::vector<float>> state;  ///< optimizer state, each `shard` floats: {momentum} or {m, v} or {}
};

/// @brief One rank's file: who wrote it, and its shard of every unit.
struct ShardFile {
  int rank = 0;             ///< the rank that wrote it
  int world_size = 1;       ///< the world size it was written at
  std::int64_t steps = 0;   ///< optimizer steps taken
  std::string optimizer;    ///< "sgd" or "adamw"
  std::vector<UnitShard> units;  ///< in unit order
};

/// @brief What rank 0 writes beside the shards: enough to plan a load without reading them.
struct Manifest {
  int world_size = 1;              ///< how many shard files there are
  std::int64_t steps = 0;          ///< optimizer steps taken
  std::string optimizer;           ///< "sgd" or "adamw"
  std::vector<std::string> units;  ///< unit names, in order
  std::vector<std::int64_t> numels;  ///< each unit's real element count
};

/// @brief The path of rank `rank`'s file of a `world_size`-way checkpoint in `dir`.
/// @param[in] dir the folder. @param[in] rank the rank. @param[in] world_size W.
/// @return dir + "/shard-R-of-W.dtl".
std::string shard_file_path(const std::string& dir, int rank, int world_size);
/// @brief The path of the manifest in `dir`.
/// @param[in] dir the folder. @return dir + "/manifest.dtl".
std::string manifest_path(const std::string& dir);

/// @brief Writes a shard file: magic, version, header, units, then a 64-bit checksum
/// (FNV-1a) of everything before it; to path + ".tmp", renamed to path at the end.
/// @param[in] path where. @param[in] file what.
/// @throws CheckpointError naming the path if it cannot be written.
void write_shard_file(const std::string& path, const ShardFile& file);
/// @brief Reads and checks a shard file.
/// @param[in] path where.
/// @return its contents.
/// @throws CheckpointError naming the path: missing, not a shard file, truncated, or a
///         checksum that does not match (corrupt).
ShardFile read_shard_file(const std::string& path);
/// @brief Writes the manifest (same framing and checksum).
/// @param[in] path where. @param[in] manifest what.
/// @throws CheckpointError naming the path.
void write_manifest(const std::string& path, const Manifest& manifest);
/// @brief Reads and checks the manifest.
/// @param[in] path where. @return its contents.
/// @throws CheckpointError naming the path, as read_shard_file().
Manifest read_manifest(const std::string& path);

/// @brief Makes every rank succeed or fail together.
///
/// Collective over `backend`: each rank passes its own error message ("" when it
/// succeeded). If every message is empty, returns. Otherwise every rank throws
/// CheckpointError with the message of the lowest rank that failed, prefixed by
/// "rank R: " (an int allreduce of the failing ranks and a broadcast of the message).
/// @param[in] backend the ranks.
/// @param[in] error this rank's error, or "".
/// @throws CheckpointError on every rank if any rank's error is not empty.
void agree_or_throw(Communicator& backend, const std::string& error);

}  // namespace dtl::lab06
