/// @file
/// @brief Lab 08 — tensor parallelism: the API you implement in src/.
///
/// Data parallelism copies the whole model onto every rank; pipelines cut it
/// between layers. Tensor parallelism (Megatron-LM, Shoeybi et al., 2019) cuts
/// *inside* each layer: every weight matrix is split across the T ranks of a
/// tensor-parallel group, each rank multiplies by its slice, and a collective
/// puts the pieces together. Parameters, gradients and optimizer state shrink
/// by T; the price is one allreduce of an activation per split layer pair, in
/// forward and again in backward, on the critical path. This lab builds, on the
/// training core (harness/nn) and the Communicator interface (harness/comm):
///
///   - Task A (parallel_linear.cc): ColumnParallelLinear (weight split by output
///     features; forward has no communication, backward allreduces dx) and
///     RowParallelLinear (split by input features; forward allreduces y) — the
///     conjugate operators f and g of Note [f and g];
///   - Task B (blocks.cc): the Megatron MLP block (column then row: one
///     allreduce forward, one backward) and attention with its heads split
///     across the ranks (ParallelSelfAttention: qkv column-parallel, proj
///     row-parallel);
///   - Task C (vocab_parallel.cc): the vocabulary-parallel embedding and a
///     cross-entropy that never gathers the full logits (VocabParallelEmbedding,
///     VocabParallelCrossEntropy);
///   - Task D (the sequence_parallel branches of task A, and sequence_parallel.cc's
///     allreduce_sequence_parallel_gradients()): sequence parallelism, where the
///     LayerNorm/dropout regions keep S/T tokens of every sequence and each
///     allreduce becomes a reduce-scatter plus an all-gather;
///   - TP x DP: tensor parallel inside a group of T consecutive ranks, data
///     parallel across the groups, on lab 07's grid (lab07/grid.h: your lab-07
///     make_grid() with T as the model size, and allreduce_data_parallel_gradients();
///     this lab links lab 07's library, as lab 04 links lab 03's).
///
/// and, given (labs/08_tensor_parallel/given/, compiled into both builds, not yours to edit):
///   - tp_util.cc   shard_range() (the one place a size is split and refused),
///                  sequence_shard() (the one place a rank's tokens are chosen),
///                  round_up(), and make_tensor_parallel_gpt(), which builds a
///                  GPT's tensor-parallel copy from your layers and blocks;
///   - layer_helpers.{h,cc}  the layers' size checks, bias helpers, output shapes,
///                  activation slots and parameter lists around your passes.
///
/// The API is in four headers, one concept each; this one includes the others:
///   - lab08/parallel_linear.h  task A (and D's layer half): Note [Tensor
///                  parallelism], Note [f and g], Note [Splitting a fused
///                  projection], Note [Sequence parallelism]; the given size splitting
///                  and sequence_shard(), the one map from a rank to its tokens;
///   - lab08/blocks.h           task B: Note [Heads split];
///   - lab08/vocab_parallel.h   task C: Note [Vocabulary parallel];
///   - lab08/tensor_parallel.h  (this one) the whole model: Note [Communication and
///                  memory per layer], Note [Activation memory with sequence
///                  parallelism], Note [TP x DP], Note [Why TP stays inside a
///                  node], the given tensor-parallel GPT, and task D's gradients.
/// The handout and the slides refer to the notes by name.
///
/// Every layer here is built *from the unsplit layer* of harness/nn (the same
/// seed on every rank gives the same full model; each rank keeps its slice), so
/// a tensor-parallel model computes exactly what the full model computes, up to
/// the order of floating-point sums.
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <mpi.h>

#include <span>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/tensor.h"
#include "lab07/grid.h"
#include "lab08/blocks.h"
#include "lab08/parallel_linear.h"
#include "lab08/vocab_parallel.h"

namespace dtl::lab08 {

// Note [Communication and memory per layer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// N rows (B T), C channels, T tensor-parallel ranks, 4-byte elements. Bytes are
// the whole buffer n of the cost formulas (OpInfo::total_bytes()).
//
//   layer                      forward             backward             parameters per rank
//   ColumnParallelLinear(i,o)  -                   allreduce N i        o i / T + o / T
//   RowParallelLinear(i,o)     allreduce N o       -                    o i / T + o
//   MLP block (C, 4C)          allreduce N C       allreduce N C        8 C^2 / T + 4C / T + C + 2C (LN)
//   attention block (C, NH)    allreduce N C       allreduce N C        4 C^2 / T + 3C / T + C + 2C (LN)
//   VocabParallelEmbedding     allreduce N C       -                    V C / T
//   VocabParallelCrossEntropy  all-gather N, allreduce 2N (f64)  -      -
//   with sequence parallelism: each allreduce of n bytes becomes an all-gather
//   and a reduce-scatter of n bytes each (one in forward, one in backward); the
//   activations: Note [Activation memory with sequence parallelism].
//
// The counts hold for every T, T = 1 included (a collective over a group of one
// is a copy): the tests compare the recorded operations with this table exactly.
// A GPT block therefore costs 2 allreduces of N C forward and 2 backward:
// 4 N C elements per block per step, whatever T is, on the critical path.
// With the ring (lab 03) each rank sends 2 (T-1)/T of each; the time is
// 4 * 2 (T-1)/T * 4 N C / bandwidth per block. See Note [Why TP stays inside a node].

// Note [Activation memory with sequence parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Activation bytes a block holds per rank after its forward, e bytes per element,
// N = B S tokens, n = N/T, C channels, NH heads (the tests measure every line with
// the memory tracker, MemoryCategory::kActivations, exactly):
//
//                            plain TP              with sequence parallelism
//   LayerNorm (y, mean, rstd) N (C + 2)            n (C + 2)           split region
//   residual sum x + f(x)     N C                  n C                 split region
//   column layer              N o/T                N C + N o/T         (+ the gathered input)
//   row layer                 N C + N C            N C + n C           (local product, output)
//   between: MLP GELU         N 4C/T               N 4C/T
//            attention core   B NH/T S^2 + N C/T   the same
//
// (o = 4C for the MLP's fc, 3C for qkv.) The split regions hold exactly 1/T of plain
// TP's bytes. The whole block holds less than plain TP but more than 1/T of it: this
// lab keeps the gathered input of each column layer for its backward, and the local
// product of the row layer; Megatron keeps only this rank's tokens of the input and
// gathers them again in backward, which is how Korthikanti et al. reach 1/T for the
// whole layer. The buffers a collective uses in rank order are kCommunication.

// Note [TP x DP]
// ~~~~~~~~~~~~~~
// W = T x D ranks: D data-parallel replicas, each a tensor-parallel group of T
// consecutive ranks (consecutive: on a real machine they share a node and its
// NVLink). Rank w is tensor-parallel rank w mod T of replica w / T. Two
// sub-communicators per rank, from lab 07's make_grid(world, T) (lab07/grid.h):
// its tensor-parallel group, the grid's model_group (every layer's collectives;
// model_rank is the tensor-parallel rank), and its data_group (the ranks holding the
// *same slice* of every weight in the other replicas: the gradient average).
// Each replica takes 1/D of the batch; the T ranks of a replica read the same
// rows. After backward, every rank averages its (sliced) gradients over its
// data-parallel group (allreduce_data_parallel_gradients()): the gradient of a
// slice is averaged only with copies of the same slice. At 4 ranks, T = 2:
// tensor groups {0, 1} and {2, 3}, data groups {0, 2} and {1, 3}.
//
// 3D: put pipeline stages (lab 07) on top: W = T x P x D. Tensor parallel
// inside a node (allreduces of activations every layer), pipeline stages across
// nodes (point-to-point activations once per stage), data parallel outermost
// (one gradient allreduce per step, overlapped with backward). The handout
// works through a table of memory and communication for a concrete model.

// Note [Why TP stays inside a node]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Per GPT block and step, tensor parallelism moves 4 allreduces of N C
// elements, none of which can overlap the compute that needs its result. Data
// parallelism moves one allreduce of the block's 12 C^2 parameters per step,
// overlapped with backward. For N = 8192 tokens and C = 4096 a TP block moves
// 4 x 128 MiB (f32) every step; over NVLink (hundreds of GB/s) that is a few ms,
// over 10 GbE (1.25 GB/s) it is seconds — far longer than the block's compute.
// So tensor groups are the GPUs of one node and T is at most 8; pipeline and
// data parallelism cross the slower links. `./dtl bench 08` measures it on
// emulated links.

// ---------------------------------------------------------------------------
// Given: a GPT, tensor-parallel (tp_util.cc)
// ---------------------------------------------------------------------------

/// @brief The tensor-parallel copy of a GPT made by nn::make_gpt() (given).
///
/// Units as the full model's: "embed" = VocabParallelEmbedding + a copy of the
/// positional embedding; "block i" = make_parallel_attention_block() and
/// make_parallel_mlp_block() of the full blocks; "head" = a copy of the final
/// LayerNorm and the output layer as a ColumnParallelLinear, whose output is this
/// rank's (B, S, V/T) logits for VocabParallelCrossEntropy.
///
/// With sequence parallelism (Note [Sequence parallelism]) "embed" ends with a layer
/// that keeps this rank's tokens of every sequence (its backward sums the ranks'
/// gradients, each in its own tokens, into the whole dL/dx); the blocks are
/// sequence-parallel, the final LayerNorm runs on this rank's tokens, and the head's
/// column-parallel layer gathers them back: the logits are (B, S, V/T) as without.
/// The parameters whose gradients are then partial (every LayerNorm, the row-parallel
/// biases) go through allreduce_sequence_parallel_gradients() before the step.
/// @param[in] full the whole GPT (f32 or f64), the same on every rank; read, not changed.
/// @param[in] tp the tensor-parallel group; must outlive the model.
/// @param[in] sequence_parallel split the LayerNorm and residual regions along the sequence.
/// @return this rank's model.
/// @throws dtl::InvalidArgument if T does not divide V, C or the heads (from the layers); in
///         forward, naming "x" and the tensor-parallel rank, if T does not divide the sequence.
nn::Model make_tensor_parallel_gpt(nn::Model& full, Communicator& tp, bool sequence_parallel = false);

/// @brief The parameters of a model whose gradients are partial with sequence parallelism (given):
/// every LayerNorm's weight and bias and every row-parallel layer's bias, in forward order.
///
/// What a sequence-parallel GPT of make_tensor_parallel_gpt() passes to
/// allreduce_sequence_parallel_gradients() after each backward. Found by the layers'
/// types (LayerNorm, RowParallelLinear, ParallelSelfAttention's proj), inside Residual
/// and Sequential layers.
/// @param[in] model the model; its parameters are returned, not changed.
/// @return pointers to the parameters, owned by the model.
std::vector<nn::Parameter*> sequence_parallel_parameters(nn::Model& model);

// ---------------------------------------------------------------------------
// Task D: gradients across the tensor group (sequence_parallel.cc); TP x DP on lab 07's grid
// ---------------------------------------------------------------------------

// TP x DP runs on lab 07's grid (Note [TP x DP]): one Grid, one make_grid() and one
// allreduce_data_parallel_gradients() for both labs, your lab-07 code.
using lab07::allreduce_data_parallel_gradients;
using lab07::Grid;
using lab07::make_grid;

// Note [One collective for the small gradients]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The bench's sequence-parallel GPT has 14 replicated parameters whose gradients are
// partial (per block, two LayerNorms' weights and biases and two row-parallel biases;
// the final LayerNorm's weight and bias), each C = 128 floats: 7 KiB in all. A collective costs a latency whatever its size
// (alpha in the alpha-beta model; on Open MPI with a polling progress thread, rounds of
// at least one poll each), so 14 allreduces of 512 bytes cost about 14 latencies and
// move almost nothing. One allreduce of the 14 packed end to end costs one: DDP's
// bucket (lab 04), here one bucket, because the gradients are tiny and all ready at
// once, after backward. On the emulated 10 GbE link (alpha 10 us) the one allreduce saves
// 13 latencies, 0.26 ms per step of the bench's GPT at T = 2. On Open MPI with a polling
// progress thread the 14 were in flight together and progressed in the same polls, so
// one waits about as long as they did (0.6 ms): bench/RESULTS.md, "Where SP's extra
// time goes".

/// @brief Sums the partial gradients of parameters used in a sequence-parallel
/// region over the tensor-parallel group (Note [Sequence parallelism], in lab08/parallel_linear.h),
/// with one collective for them all (Note [One collective for the small gradients]).
///
/// Collective over `tp`: every rank passes its copies of the same parameters, in the same order.
/// It issues exactly one allreduce of the gradients' total count, and none for a group of one
/// or an empty list.
/// @param[in] tp the tensor-parallel group.
/// @param[in] replicated the parameters replicated on every rank and used on split rows
///            (LayerNorm weights and biases, row-parallel biases); all f32 or all f64.
/// @throws dtl::InvalidArgument naming "replicated" and the tensor-parallel rank, before any
///         collective, if the gradients are not all of one dtype.
void allreduce_sequence_parallel_gradients(Communicator& tp, std::span<nn::Parameter* const> replicated);

}  // namespace dtl::lab08
