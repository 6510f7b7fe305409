/// @file
/// @brief Lab 07, task G: the zero-bubble schedule ZB-H1 (Qi et al., 2023), each
/// backward split into B (the input gradient) and W (the weight gradient)
/// (zb_h1_schedule(), yours in src/zero_bubble.cc). The schedule is data, Actions
/// with Pass::kWeight among them, run by the given InterleavedStage (lab07/interleave.h)
/// with one chunk per rank, which runs B and W with the training core's split
/// backward (Note [Split backward] in harness/nn/layer_interface.h).
///
/// Do not edit this header: the grader compiles your src/ against its own copy.
#pragma once

#include <vector>

#include "lab07/pipeline.h"

namespace dtl::lab07 {

// Note [Zero bubble]
// ~~~~~~~~~~~~~~~~~~
// A stage's backward of micro-batch i does two things (Note [Split backward]):
//
//   B(i)  dL/dx, which stage s - 1 waits for: needs F(i) here and B(i) of s + 1;
//   W(i)  dL/dweights, which nobody waits for until the optimizer step: needs B(i) here.
//
// 1F1B runs both as one backward, so the cool-down's waits are
// (P - 1)(t_F + t_B + t_W) per stage (Note [The bubble]). Zero Bubble Pipeline
// Parallelism (Qi, Wan, Huang, Lin; ICLR 2024, arXiv 2311.16241) runs W apart and
// late, in the time a stage would otherwise wait. Its handcrafted schedule ZB-H1
// keeps 1F1B's order of forwards and input backwards (so a stage still starts
// B(i) as early as 1F1B starts its backward) and places the W's so that
//
//   - no stage holds more micro-batches between their F and their W than 1F1B's
//     most loaded stage holds between F and backward: P (stage 0's, for m >= P).
//     After B(i) a micro-batch still holds what W(i) reads (each Linear's input
//     and dy); we count it as a whole micro-batch until W(i), which only
//     overstates ZB-H1's memory;
//   - the bubble drops to (P - 1)(t_F + t_B - t_W) per stage (the paper's
//     section 3.1; exact for m >= P and t_W <= min(t_F, t_B) in the tests'
//     simulator): with t_F = t_B = t_W it is a third of 1F1B's, the paper's
//     "about 1/3 of 1F1B's bubble".
//
// The later stages have the least to wait for in 1F1B's cool-down and the most
// in its warm-up; the earlier stages the opposite. Where the W's go, and why
// that costs no memory above 1F1B's peak, is task G (handout, Task G).
// ZB-H2 (the paper's second schedule) trades memory for the rest of the bubble:
// 2P - 1 micro-batches in flight and a bubble near zero; we build H1 only.
//
// On our CPU layers t_W is about t_B for a Linear (both a GEMM of the same
// size); LayerNorm and the embeddings do their weight work in B (Note [Split
// backward]), which moves a little of t_W into t_B.

// ---------------------------------------------------------------------------
// Task G: ZB-H1 (zero_bubble.cc)
// ---------------------------------------------------------------------------

/// @brief ZB-H1's order on stage `stage` (Note [Zero bubble]): F, B and W of every
/// micro-batch.
///
/// Invariants of the result (what the tests check, with their own simulator):
///   - 3m actions: each micro-batch once as F, once as B and once as W, in that
///     order; the F's in micro-batch order, the B's too, and the W's too; every chunk 0;
///   - with its W's taken out, the list is 1F1B's (one_f_one_b_schedule(P, s, m));
///   - at no point does the stage hold more than P micro-batches between their F
///     and their W;
///   - run by all P stages at once it never waits in a cycle, and with balanced
///     ops (every F t_F, every B t_B, every W t_W; t_W <= t_B) it finishes no later
///     than the greedy placement of the W's does: every stage running its 1F1B
///     order, and a W it owes whenever its next F or B cannot start yet, or before
///     an F that would break the bound above. With t_F = t_B = t_W = t and m >= P
///     the bubble is then (P - 1) t per stage, a third of 1F1B's (P - 1) 3t.
/// P = 1 has nothing to wait for: F0 B0 W0 F1 B1 W1 ...
/// @param[in] stages P >= 1.
/// @param[in] stage s in [0, P).
/// @param[in] micro_batches m in [1, kMaxMicroBatches].
/// @return 3m actions.
/// @throws dtl::InvalidArgument naming the argument out of range.
std::vector<Action> zb_h1_schedule(int stages, int stage, int micro_batches);

}  // namespace dtl::lab07
