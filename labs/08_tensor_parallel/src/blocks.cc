// Lab 08, task B: the Megatron MLP block and attention with its heads split.
//
// What this file teaches: a transformer block needs one collective per
// direction, because its two matrix products come in column/row pairs
// (See Note [Tensor parallelism]):
//
//     MLP:        LayerNorm -> fc (column) -> GELU -> proj (row) -> + x
//     attention:  LayerNorm -> qkv (column, 3 groups) -> core on NH/T heads -> proj (row) -> + x
//
//     forward:   x (whole) --f: nothing--> slices ... slices --g: allreduce--> y (whole)
//     backward: dx (whole) <--f: allreduce-- slices ... slices <--g: nothing-- dy (whole)
//
// Everything between f and g (the GELU, the softmax of each head) works on the
// rank's own slice: heads do not talk to each other before proj
// (See Note [Heads split]).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/nn/layer_util.h"
#include "lab08/blocks.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // ensure(), require_input()

// ---------------------------------------------------------------------------
// ParallelSelfAttention
// ---------------------------------------------------------------------------

ParallelSelfAttention::ParallelSelfAttention(nn::CausalSelfAttention& full, Communicator& tp,
                                             bool sequence_parallel)
    : nn::Layer(full.name()),
      channels_(full.qkv().weight().value.dim(1)),
      heads_(full.heads()),
      local_heads_(local_heads(full, tp)) {
  // TODO(student): Build this rank's share of `full` (Note [Heads split]): qkv_ a ColumnParallelLinear of
  //   full.qkv() whose local output is [q | k | v] for this rank's NH/T heads (Note
  //   [Splitting a fused projection]), proj_ a RowParallelLinear of full.proj(), both with
  //   the sequence_parallel flag (handout Task B).
  throw dtl::NotImplemented("ParallelSelfAttention");
}

const nn::Tensor& ParallelSelfAttention::forward(const nn::Tensor& x) {
  detail::require_input(x, qkv_->local().weight().value.dtype(), channels_, name_, "x");
  output_shape(x.shape());  // checks (B, T, C)
  Cache& cache = caches_.at(slot_);
  // TODO(student): Return the attention's output y (B, T, C) as the full layer computes it (up to the
  //   order of sums), computing only this rank's heads: nn::attention_core_forward() on
  //   local_heads_ heads between qkv_ and proj_, its buffers (cache.qkv, cache.att,
  //   cache.out) in `cache`, made with detail::ensure(). The only communication is the
  //   parallel layers' own (handout Task B).
  throw dtl::NotImplemented("ParallelSelfAttention::forward");
}

const nn::Tensor& ParallelSelfAttention::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  DTL_REQUIRE_ARG(cache.qkv.defined(), (name_ + ".backward").c_str(), "dy", "came before any forward in this slot");
  // TODO(student): Return dL/dx, the whole of it on every rank (as the full layer's backward), with this
  //   rank's parameter gradients accumulated, through proj_, nn::attention_core_backward()
  //   and qkv_ (cache.dqkv shaped like cache.qkv). The only communication is the parallel
  //   layers' own (handout Task B).
  throw dtl::NotImplemented("ParallelSelfAttention::backward");
}

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

std::unique_ptr<nn::Layer> make_parallel_mlp_block(nn::Layer& full, Communicator& tp, bool sequence_parallel) {
  const char* function = "make_parallel_mlp_block";
  nn::Sequential& seq = block_layers(full, 4, function);
  nn::LayerNorm& ln = expect<nn::LayerNorm>(*seq.layers()[0], function, "a LayerNorm");
  nn::Linear& fc = expect<nn::Linear>(*seq.layers()[1], function, "a Linear (fc)");
  nn::Layer& act = *seq.layers()[2];
  DTL_REQUIRE_ARG(act.kind() == "GELU" || act.kind() == "ReLU", function, "full",
                  "holds '" + act.name() + "', a " + act.kind() + ", where GELU or ReLU was expected");
  nn::Linear& proj = expect<nn::Linear>(*seq.layers()[3], function, "a Linear (proj)");
  std::vector<std::unique_ptr<nn::Layer>> layers;
  // TODO(student): Return the tensor-parallel twin of the full MLP block: the same layers in the same
  //   order and with the same names (the LayerNorm replicated via copy_layer_norm(), fc
  //   column-parallel, a new activation of act's kind and name on the slices, proj
  //   row-parallel, both with options.sequence_parallel), wrapped as the full block is: a
  //   Residual named full.name() around a Sequential named seq.name() (Note [Tensor
  //   parallelism], handout Task B). The layer checks are written above.
  throw dtl::NotImplemented("make_parallel_mlp_block");
}

std::unique_ptr<nn::Layer> make_parallel_attention_block(nn::Layer& full, Communicator& tp,
                                                         bool sequence_parallel) {
  const char* function = "make_parallel_attention_block";
  nn::Sequential& seq = block_layers(full, 2, function);
  nn::LayerNorm& ln = expect<nn::LayerNorm>(*seq.layers()[0], function, "a LayerNorm");
  nn::CausalSelfAttention& attn = expect<nn::CausalSelfAttention>(*seq.layers()[1], function, "a CausalSelfAttention");
  std::vector<std::unique_ptr<nn::Layer>> layers;
  // TODO(student): Return the tensor-parallel twin of the full attention block: copy_layer_norm(ln), then
  //   a ParallelSelfAttention of attn, wrapped with the same Residual and Sequential names as
  //   the full block (handout Task B).
  throw dtl::NotImplemented("make_parallel_attention_block");
}

}  // namespace dtl::lab08
