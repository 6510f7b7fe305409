/// @file
/// @brief Every layer and the loss, in one include: backpropagation by hand.
///
/// | header            | holds |
/// | ----------------- | ----- |
/// | layer_interface.h | Parameter, GradReadyFn, SlotCaches, the Layer interface and its conventions; Sequential, Residual |
/// | dense.h           | Linear, ReLU, GELU |
/// | normalization.h   | LayerNorm |
/// | embedding.h       | Embedding, PositionalEmbedding |
/// | transformer.h     | CausalSelfAttention, make_attention_block, make_mlp_block |
/// | loss.h            | SoftmaxCrossEntropy |
#pragma once

#include "harness/nn/dense.h"             // IWYU pragma: export
#include "harness/nn/embedding.h"         // IWYU pragma: export
#include "harness/nn/layer_interface.h"   // IWYU pragma: export
#include "harness/nn/loss.h"              // IWYU pragma: export
#include "harness/nn/normalization.h"     // IWYU pragma: export
#include "harness/nn/transformer.h"       // IWYU pragma: export
