// Lab 08, given (not a task): helpers of the parallel layers (src/parallel_linear.cc,
// src/blocks.cc). The sizes a constructor needs, checked before anything is
// allocated (so a bad argument throws on every rank before any communication);
// the bias a row-parallel layer adds once; and the layers of a full block, each
// as the type it must be. Defined in given/layer_helpers.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/error.h"
#include "harness/random.h"
#include "lab08/parallel_linear.h"

namespace dtl::lab08 {

/// The weights of the local layers are copied from the full layer right after
/// construction; this generator only feeds the harness's initialization.
dtl::Rng& unused_rng();

/// Output features of this rank's column-parallel slice of `full` (out/T per group, times groups).
/// @throws dtl::InvalidArgument if the groups or T do not divide the output features.
std::int64_t column_local_out(nn::Linear& full, Communicator& tp, const ParallelOptions& options);

/// Input features of this rank's row-parallel slice of `full` (in/T).
/// @throws dtl::InvalidArgument if options.groups != 1 or T does not divide the input features.
std::int64_t row_local_in(nn::Linear& full, Communicator& tp, const ParallelOptions& options);

/// With sequence parallelism, the sequence (the second-to-last dimension) of `t` is split
/// across the group: T must divide it (sequence_shard()).
/// @throws dtl::InvalidArgument naming `layer`.forward, `argument` and the tensor-parallel rank otherwise.
void require_sequence(const nn::Tensor& t, Communicator& tp, const std::string& layer, const char* argument);

/// Makes `t` a buffer of this shape and dtype charged to MemoryCategory::kCommunication:
/// a collective's input or output in rank order, which exists only for the collective
/// (Note [Sequence parallelism]). A buffer of the right shape is reused, not zeroed.
void ensure_staging(nn::Tensor& t, const nn::Shape& shape, nn::DType dtype);

/// y (N, out) += b (out), row by row (f32 or f64).
void add_bias(const nn::Tensor& y, const nn::Tensor& b);

/// db (out) += the sum over rows of dy (N, out) (f32 or f64).
void add_bias_grad(const nn::Tensor& db, const nn::Tensor& dy);

/// A layer of a full block, as the type it must be; a clear error otherwise.
template <typename L>
L& expect(nn::Layer& layer, const char* function, const char* what) {
  auto* typed = dynamic_cast<L*>(&layer);
  DTL_REQUIRE_ARG(typed != nullptr, function, "full",
                  "holds '" + layer.name() + "', a " + layer.kind() + ", where " + what + " was expected");
  return *typed;
}

/// The Sequential inside a block of nn::make_mlp_block() / make_attention_block(), with `layers` layers.
nn::Sequential& block_layers(nn::Layer& full, std::size_t layers, const char* function);

/// The number of heads on each rank (NH / T), checked before anything is allocated.
std::int64_t local_heads(nn::CausalSelfAttention& full, Communicator& tp);

}  // namespace dtl::lab08
