// Lab 08, given (not a task; compiled into both builds): how a size is split
// (and refused), the Communicator's element types, padded sizes, and a GPT made
// tensor-parallel from your layers and blocks.
//
// What this file teaches: a tensor-parallel model is built from the full one.
// Every rank builds the same full model from the same seed, then keeps its
// slice of each layer; afterwards the full model can go. So the tensor-parallel
// model starts from exactly the full model's weights, and every test can
// compare it with the full model run in one process.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/nn/layer_util.h"
#include "lab08/tensor_parallel.h"
#include "layer_helpers.h"

namespace dtl::lab08 {

ShardRange shard_range(std::int64_t size, int parts, int index, const char* function, const char* argument,
                       const std::string& what) {
  DTL_REQUIRE_ARG(parts >= 1 && index >= 0 && index < parts, function, argument,
                  "is split into " + std::to_string(parts) + " parts, and part " + std::to_string(index) +
                      " does not exist");
  DTL_REQUIRE_ARG(size >= 1 && size % parts == 0, function, argument,
                  "has " + std::to_string(size) + " " + what + ", not divisible by the " + std::to_string(parts) +
                      " tensor-parallel ranks (tensor-parallel rank " + std::to_string(index) + " of " +
                      std::to_string(parts) + "); pad the model to a multiple of " + std::to_string(parts) +
                      " (round_up())");
  const std::int64_t slice = size / parts;
  return {index * slice, slice};
}

SequenceShard sequence_shard(const nn::Shape& full, int parts, int index, const char* function,
                             const char* argument) {
  DTL_REQUIRE_ARG(parts >= 1 && index >= 0 && index < parts, function, argument,
                  "is split into " + std::to_string(parts) + " parts, and part " + std::to_string(index) +
                      " does not exist");
  DTL_REQUIRE_ARG(full.size() >= 2, function, argument,
                  "has shape " + nn::to_string(full) + "; sequence parallelism needs (..., S, C)");
  SequenceShard shard;
  shard.length = full[full.size() - 2];
  shard.token = full.back();
  shard.sequences = 1;
  for (std::size_t d = 0; d + 2 < full.size(); ++d) shard.sequences *= full[d];
  DTL_REQUIRE_ARG(shard.length >= 1 && shard.length % parts == 0, function, argument,
                  "has shape " + nn::to_string(full) + ": sequences of " + std::to_string(shard.length) +
                      " tokens, not divisible by the " + std::to_string(parts) +
                      " tensor-parallel ranks (tensor-parallel rank " + std::to_string(index) + " of " +
                      std::to_string(parts) + "); sequence parallelism gives every rank S/T tokens of each sequence");
  const std::int64_t per_rank = shard.length / parts;
  shard.tokens = {index * per_rank, per_rank};
  return shard;
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  DTL_REQUIRE_ARG(multiple >= 1, "round_up", "multiple", "must be at least 1, not " + std::to_string(multiple));
  DTL_REQUIRE_ARG(value >= 0, "round_up", "value", "must be >= 0, not " + std::to_string(value));
  return (value + multiple - 1) / multiple * multiple;
}

// A copy of a replicated layer: every rank holds all of it.
std::unique_ptr<nn::LayerNorm> copy_layer_norm(nn::LayerNorm& full) {
  const nn::Tensor& w = full.parameters()[0]->value;
  auto copy = std::make_unique<nn::LayerNorm>(full.name(), w.numel(), w.dtype());
  for (std::size_t i = 0; i < 2; ++i) copy->parameters()[i]->value.copy_from(full.parameters()[i]->value);
  return copy;
}

namespace {

// A layer of the full model, as the type it must be; a clear error otherwise.
template <typename L>
L& expect_layer(nn::Layer& layer, const char* what) {
  auto* typed = dynamic_cast<L*>(&layer);
  DTL_REQUIRE_ARG(typed != nullptr, "make_tensor_parallel_gpt", "full",
                  "is not a GPT of nn::make_gpt(): layer '" + layer.name() + "' is a " + layer.kind() +
                      ", expected " + what);
  return *typed;
}

std::unique_ptr<nn::Layer> copy_positions(nn::PositionalEmbedding& full) {
  const nn::Tensor& w = full.parameters()[0]->value;
  dtl::Rng unused(0);  // the weights are overwritten by the full layer's
  auto copy = std::make_unique<nn::PositionalEmbedding>(full.name(), w.dim(0), w.dim(1), w.dtype(), unused);
  copy->parameters()[0]->value.copy_from(w);
  return copy;
}

// Where a sequence-parallel GPT enters the split region (Note [Sequence parallelism]).
// The embedding's output is whole on every rank (its allreduce, task C); this layer keeps
// this rank's tokens of every sequence. Its backward hands the embedding what plain
// TP's first column layer would: the whole dL/dx, the same on every rank. Each rank
// holds the complete gradient of its own tokens, so an all-gather of the tokens gives it
// (an allreduce of zero-padded copies would move twice the bytes in more rounds, for the
// same result). (Megatron turns the embedding's allreduce into a reduce-scatter instead;
// this keeps task C as it is.)
class SequenceSplit : public nn::Layer {
 public:
  SequenceSplit(std::string name, Communicator& tp) : nn::Layer(std::move(name)), tp_(tp) {}
  std::string kind() const override { return "SequenceSplit"; }

  const nn::Tensor& forward(const nn::Tensor& x) override {
    const std::string function = name_ + ".forward";
    const SequenceShard s = sequence_shard(x.shape(), tp_.world_size(), tp_.rank(), function.c_str(), "x");
    Cache& cache = caches_.at(slot_);
    cache.full = x.shape();
    nn::detail::ensure(cache.y, output_shape(x.shape()), x.dtype());
    const std::int64_t piece = s.tokens.size * s.token;  // this rank's tokens of one sequence
    for (std::int64_t b = 0; b < s.sequences; ++b) {
      cache.y.view(b * piece, {piece}).copy_from(x.view((b * s.length + s.tokens.begin) * s.token, {piece}));
    }
    return cache.y;
  }

  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn& /*grad_ready*/) override {
    Cache& cache = caches_.at(slot_);
    nn::detail::require_grad(dy, cache.y, name_);
    nn::detail::ensure(cache.dx, cache.full, dy.dtype());
    const auto count = static_cast<std::size_t>(dy.numel());
    const int parts = tp_.world_size();
    const SequenceShard first = sequence_shard(cache.full, parts, 0, name_.c_str(), "x");
    if (parts == 1 || first.sequences == 1) {  // rank order is sequence order
      tp_.allgather(dy.raw(), cache.dx.raw(), count, dy.dtype()).wait();
      return cache.dx;
    }
    // Block q of the all-gather is rank q's tokens of every sequence: put each piece in its place.
    ensure_staging(cache.staging, {cache.dx.numel()}, dy.dtype());
    tp_.allgather(dy.raw(), cache.staging.raw(), count, dy.dtype()).wait();
    for (int q = 0; q < parts; ++q) {
      const SequenceShard s = sequence_shard(cache.full, parts, q, name_.c_str(), "x");
      const std::int64_t piece = s.tokens.size * s.token;  // rank q's tokens of one sequence
      for (std::int64_t b = 0; b < s.sequences; ++b) {
        cache.dx.view((b * s.length + s.tokens.begin) * s.token, {piece})
            .copy_from(cache.staging.view((q * s.sequences + b) * piece, {piece}));
      }
    }
    return cache.dx;
  }

  nn::Shape output_shape(const nn::Shape& input) const override {
    const SequenceShard s =
        sequence_shard(input, tp_.world_size(), tp_.rank(), (name_ + ".output_shape").c_str(), "input");
    nn::Shape out = input;
    out[out.size() - 2] = s.tokens.size;
    return out;
  }
  void release_slot(int slot) override { caches_.release(slot); }

 private:
  struct Cache {
    nn::Shape full;       // the whole input's shape
    nn::Tensor y, dx;     // this rank's tokens; the whole gradient
    nn::Tensor staging;   // the all-gather's output in rank order (kCommunication)
  };
  Communicator& tp_;
  nn::SlotCaches<Cache> caches_;
};

}  // namespace

nn::Model make_tensor_parallel_gpt(nn::Model& full, Communicator& tp, bool sequence_parallel) {
  DTL_REQUIRE_ARG(full.unit_count() >= 3 && full.unit(0).name == "embed" &&
                      full.unit(full.unit_count() - 1).name == "head",
                  "make_tensor_parallel_gpt", "full", "is not a GPT of nn::make_gpt() (units embed, block*, head)");
  nn::Model model(full.dtype());
  {
    nn::Unit& embed = full.unit(0);
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(std::make_unique<VocabParallelEmbedding>(
        expect_layer<nn::Embedding>(*embed.layers.at(0), "Embedding"), tp));
    layers.push_back(copy_positions(expect_layer<nn::PositionalEmbedding>(*embed.layers.at(1), "PositionalEmbedding")));
    if (sequence_parallel) layers.push_back(std::make_unique<SequenceSplit>(embed.name + ".split", tp));
    model.add_unit(embed.name, std::move(layers));
  }
  for (int u = 1; u + 1 < full.unit_count(); ++u) {
    nn::Unit& block = full.unit(u);
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(make_parallel_attention_block(*block.layers.at(0), tp, sequence_parallel));
    layers.push_back(make_parallel_mlp_block(*block.layers.at(1), tp, sequence_parallel));
    model.add_unit(block.name, std::move(layers));
  }
  nn::Unit& head = full.unit(full.unit_count() - 1);
  std::vector<std::unique_ptr<nn::Layer>> layers;
  layers.push_back(copy_layer_norm(expect_layer<nn::LayerNorm>(*head.layers.at(0), "LayerNorm")));
  ParallelOptions options;
  options.sequence_parallel = sequence_parallel;  // the head gathers the tokens back: (B, S, V/T) logits
  layers.push_back(
      std::make_unique<ColumnParallelLinear>(expect_layer<nn::Linear>(*head.layers.at(1), "Linear"), tp, options));
  model.add_unit(head.name, std::move(layers));
  return model;
}

namespace {

// Adds the parameters of `layer` that see only this rank's tokens (Note [Sequence parallelism]).
void add_split_region_parameters(nn::Layer& layer, std::vector<nn::Parameter*>& out) {
  if (auto* ln = dynamic_cast<nn::LayerNorm*>(&layer)) {
    for (nn::Parameter* p : ln->parameters()) out.push_back(p);
  } else if (auto* row = dynamic_cast<RowParallelLinear*>(&layer)) {
    if (row->bias().value.defined()) out.push_back(&row->bias());
  } else if (auto* attention = dynamic_cast<ParallelSelfAttention*>(&layer)) {
    add_split_region_parameters(attention->proj(), out);
  } else if (auto* residual = dynamic_cast<nn::Residual*>(&layer)) {
    add_split_region_parameters(residual->inner(), out);
  } else if (auto* seq = dynamic_cast<nn::Sequential*>(&layer)) {
    for (const auto& inner : seq->layers()) add_split_region_parameters(*inner, out);
  }
}

}  // namespace

std::vector<nn::Parameter*> sequence_parallel_parameters(nn::Model& model) {
  std::vector<nn::Parameter*> out;
  for (int u = 0; u < model.unit_count(); ++u) {
    for (const auto& layer : model.unit(u).layers) add_split_region_parameters(*layer, out);
  }
  return out;
}

}  // namespace dtl::lab08
