// Lab 08, given (not a task; compiled into both builds): the parallel layers'
// helpers (given/layer_helpers.h) and their plumbing around your forward and
// backward passes: output shapes, activation slots, parameter lists.
#include "layer_helpers.h"

#include <string>
#include <vector>

#include "harness/nn/layer_util.h"
#include "lab08/blocks.h"
#include "lab08/parallel_linear.h"
#include "lab08/vocab_parallel.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // dispatch_float()

dtl::Rng& unused_rng() {
  static thread_local dtl::Rng rng(0);
  return rng;
}

std::int64_t column_local_out(nn::Linear& full, Communicator& tp, const ParallelOptions& options) {
  DTL_REQUIRE_ARG(options.groups >= 1, "ColumnParallelLinear", "options",
                  "has groups = " + std::to_string(options.groups) + "; it must be at least 1");
  const std::int64_t out = full.weight().value.dim(0);
  DTL_REQUIRE_ARG(out % options.groups == 0, "ColumnParallelLinear", "full",
                  "has " + std::to_string(out) + " output features, not divisible into " +
                      std::to_string(options.groups) + " groups");
  const ShardRange mine = shard_range(out / options.groups, tp.world_size(), tp.rank(), "ColumnParallelLinear",
                                      "full", "output features per group (of " + std::to_string(options.groups) + ")");
  return mine.size * options.groups;
}

std::int64_t row_local_in(nn::Linear& full, Communicator& tp, const ParallelOptions& options) {
  DTL_REQUIRE_ARG(options.groups == 1, "RowParallelLinear", "options",
                  "has groups = " + std::to_string(options.groups) + "; a row-parallel layer takes 1");
  return shard_range(full.weight().value.dim(1), tp.world_size(), tp.rank(), "RowParallelLinear", "full",
                     "input features")
      .size;
}

void require_sequence(const nn::Tensor& t, Communicator& tp, const std::string& layer, const char* argument) {
  const std::string function = layer + ".forward";
  DTL_REQUIRE_ARG(t.defined(), function.c_str(), argument, "is undefined");
  sequence_shard(t.shape(), tp.world_size(), tp.rank(), function.c_str(), argument);
}

void ensure_staging(nn::Tensor& t, const nn::Shape& shape, nn::DType dtype) {
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype) {
    t = nn::Tensor();  // free the old buffer first, so the peak never holds both
    t = nn::Tensor::zeros(shape, dtype, nn::MemoryCategory::kCommunication);
  }
}

void add_bias(const nn::Tensor& y, const nn::Tensor& b) {
  detail::dispatch_float(y.dtype(), "RowParallelLinear::forward", [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t out = b.numel();
    T* p = y.data<T>();
    const T* q = b.data<T>();
    for (std::int64_t i = 0; i < y.numel(); ++i) p[i] += q[i % out];
  });
}

void add_bias_grad(const nn::Tensor& db, const nn::Tensor& dy) {
  detail::dispatch_float(dy.dtype(), "RowParallelLinear::backward", [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t out = db.numel();
    T* g = db.data<T>();
    const T* d = dy.data<T>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) g[i % out] += d[i];
  });
}

nn::Sequential& block_layers(nn::Layer& full, std::size_t layers, const char* function) {
  nn::Residual& residual = expect<nn::Residual>(full, function, "a Residual block");
  nn::Sequential& seq = expect<nn::Sequential>(residual.inner(), function, "a Sequential inside the block");
  DTL_REQUIRE_ARG(seq.layers().size() == layers, function, "full",
                  "has " + std::to_string(seq.layers().size()) + " layers inside '" + full.name() + "', expected " +
                      std::to_string(layers));
  return seq;
}

std::int64_t local_heads(nn::CausalSelfAttention& full, Communicator& tp) {
  return shard_range(full.heads(), tp.world_size(), tp.rank(), "ParallelSelfAttention", "full", "heads").size;
}

nn::Shape ColumnParallelLinear::output_shape(const nn::Shape& input) const {
  nn::Shape out = local_.output_shape(input);
  if (options_.sequence_parallel && out.size() >= 2) out[out.size() - 2] *= tp_.world_size();  // whole sequences
  return out;
}

void ColumnParallelLinear::set_slot(int slot) {
  nn::Layer::set_slot(slot);
  local_.set_slot(slot);
}

void ColumnParallelLinear::release_slot(int slot) {
  caches_.release(slot);
  local_.release_slot(slot);
}

std::vector<nn::Parameter*> RowParallelLinear::parameters() {
  std::vector<nn::Parameter*> all = local_.parameters();
  if (has_bias_) all.push_back(&bias_);
  return all;
}

nn::Shape RowParallelLinear::output_shape(const nn::Shape& input) const {
  nn::Shape out = local_.output_shape(input);
  if (options_.sequence_parallel) {
    const std::string function = name_ + ".output_shape";
    out[out.size() - 2] = sequence_shard(out, tp_.world_size(), tp_.rank(), function.c_str(), "input").tokens.size;
  }
  return out;
}

void RowParallelLinear::set_slot(int slot) {
  nn::Layer::set_slot(slot);
  local_.set_slot(slot);
}

void RowParallelLinear::release_slot(int slot) {
  caches_.release(slot);
  local_.release_slot(slot);
}

std::vector<nn::Parameter*> ParallelSelfAttention::parameters() {
  std::vector<nn::Parameter*> all = qkv_->parameters();
  for (nn::Parameter* p : proj_->parameters()) all.push_back(p);
  return all;
}

nn::Shape ParallelSelfAttention::output_shape(const nn::Shape& input) const {
  DTL_REQUIRE_ARG(input.size() == 3 && input[2] == channels_, (name_ + ".output_shape").c_str(), "input",
                  "is " + nn::to_string(input) + ", expected (B, T, " + std::to_string(channels_) + ")");
  return input;
}

void ParallelSelfAttention::set_slot(int slot) {
  nn::Layer::set_slot(slot);
  qkv_->set_slot(slot);
  proj_->set_slot(slot);
}

void ParallelSelfAttention::release_slot(int slot) {
  caches_.release(slot);
  qkv_->release_slot(slot);
  proj_->release_slot(slot);
}

nn::Shape VocabParallelEmbedding::output_shape(const nn::Shape& input) const {
  DTL_REQUIRE_ARG(input.size() == 2, (name_ + ".output_shape").c_str(), "input",
                  "is " + nn::to_string(input) + ", expected (B, T)");
  return {input[0], input[1], channels_};
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Communicator& tp, std::int64_t vocab) : tp_(tp), vocab_(vocab) {
  const ShardRange mine =
      shard_range(vocab, tp.world_size(), tp.rank(), "VocabParallelCrossEntropy", "vocab", "tokens");
  vocab_begin_ = mine.begin;
  vocab_local_ = mine.size;
}

}  // namespace dtl::lab08
