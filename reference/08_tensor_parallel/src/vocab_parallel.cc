// Lab 08, task C: the vocabulary-parallel embedding and cross-entropy.
//
// What this file teaches: the two ends of a language model are split by
// vocabulary, and the loss is computed without ever forming the full logits
// (See Note [Vocabulary parallel]). Rank r owns tokens [r V/T, (r+1) V/T):
//
//     embedding   y = allreduce_r( W_r[token] if token is mine else 0 )     forward: N C values
//     loss        a few numbers per row and rank (which: task C's hints)     forward: an all-gather of
//                                                                             N values, an allreduce of 2N
//     backward    local on every rank: no communication at all
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/nn/layer_util.h"
#include "lab08/parallel_linear.h"
#include "lab08/vocab_parallel.h"

namespace dtl::lab08 {

namespace detail = nn::detail;  // ensure(), notify(), require_grad(), dispatch_float()

// ---------------------------------------------------------------------------
// VocabParallelEmbedding
// ---------------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(nn::Embedding& full, Communicator& tp)
    : nn::Layer(full.name()),
      tp_(tp),
      vocab_(full.parameters()[0]->value.dim(0)),
      channels_(full.parameters()[0]->value.dim(1)) {
  const ShardRange mine = shard_range(vocab_, tp.world_size(), tp.rank(), "VocabParallelEmbedding", "full",
                                      "tokens in its vocabulary");
  vocab_begin_ = mine.begin;
  vocab_local_ = mine.size;
  weight_ = detail::make_parameter(name_ + ".weight", {vocab_local_, channels_}, full.parameters()[0]->value.dtype());
  // BEGIN SOLUTION(VocabParallelEmbedding)
  // | Fill weight_.value (V/T, C) with this rank's rows of the full table, the tokens
  // | [vocab_begin_, vocab_begin_ + vocab_local_) (Note [Vocabulary parallel], handout Task
  // | C).
  weight_.value.copy_from(full.parameters()[0]->value.view(vocab_begin_ * channels_, {vocab_local_, channels_}));
  // END SOLUTION
}

const nn::Tensor& VocabParallelEmbedding::forward(const nn::Tensor& x) {
  DTL_REQUIRE_ARG(x.defined() && x.dtype() == nn::DType::kI32 && x.ndim() == 2, (name_ + ".forward").c_str(), "x",
                  "must be (B, T) of i32 token ids");
  const std::int32_t* tokens = x.data<std::int32_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    DTL_REQUIRE_ARG(tokens[i] >= 0 && tokens[i] < vocab_, (name_ + ".forward").c_str(), "x",
                    "holds token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) + ", outside [0, " +
                        std::to_string(vocab_) + ")");
  }
  Cache& cache = caches_.at(slot_);
  cache.x = x;
  detail::ensure(cache.y, output_shape(x.shape()), weight_.value.dtype());
  // BEGIN SOLUTION(VocabParallelEmbedding::forward)
  // | Return the full embedding y (B T rows of C), identical on every rank and equal to the
  // | full table's lookup, while each rank reads only its own rows of the table; one
  // | collective (Note [Vocabulary parallel], handout Task C). detail::ensure() does not zero
  // | a reused buffer.
  detail::dispatch_float(cache.y.dtype(), "VocabParallelEmbedding::forward", [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight_.value.data<T>();
    T* y = cache.y.data<T>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t local = tokens[i] - vocab_begin_;
      const bool mine = local >= 0 && local < vocab_local_;
      for (std::int64_t j = 0; j < channels_; ++j) y[i * channels_ + j] = mine ? w[local * channels_ + j] : T(0);
    }
  });
  tp_.allreduce(cache.y.raw(), static_cast<std::size_t>(cache.y.numel()), cache.y.dtype(),
                ReduceOp::kSum)
      .wait();
  return cache.y;
  // END SOLUTION
}

const nn::Tensor& VocabParallelEmbedding::backward(const nn::Tensor& dy, const nn::GradReadyFn& grad_ready) {
  static const nn::Tensor kNoGradient;
  Cache& cache = caches_.at(slot_);
  detail::require_grad(dy, cache.y, name_);
  // BEGIN SOLUTION(VocabParallelEmbedding::backward)
  // | dy is the whole dL/dy on every rank. Accumulate into weight_.grad the gradient of this
  // | rank's rows of the table, announce the weight (detail::notify()) and return
  // | kNoGradient; no communication (Note [Vocabulary parallel]).
  const std::int32_t* tokens = cache.x.data<std::int32_t>();
  detail::dispatch_float(dy.dtype(), "VocabParallelEmbedding::backward", [&](auto zero) {
    using T = decltype(zero);
    T* dw = weight_.grad.data<T>();
    const T* g = dy.data<T>();
    for (std::int64_t i = 0; i < cache.x.numel(); ++i) {
      const std::int64_t local = tokens[i] - vocab_begin_;
      if (local < 0 || local >= vocab_local_) continue;
      for (std::int64_t j = 0; j < channels_; ++j) dw[local * channels_ + j] += g[i * channels_ + j];
    }
  });
  detail::notify(grad_ready, weight_);
  return kNoGradient;
  // END SOLUTION
}

// ---------------------------------------------------------------------------
// VocabParallelCrossEntropy
// ---------------------------------------------------------------------------

double VocabParallelCrossEntropy::forward(const nn::Tensor& logits, const nn::Tensor& targets) {
  const char* function = "VocabParallelCrossEntropy::forward";
  DTL_REQUIRE_ARG(logits.defined() && logits.ndim() >= 1 && logits.dim(-1) == vocab_local_, function, "logits",
                  "must be this rank's (N..., " + std::to_string(vocab_local_) + ") of a vocabulary of " +
                      std::to_string(vocab_) + " over " + std::to_string(tp_.world_size()) + " ranks, not " +
                      (logits.defined() ? nn::to_string(logits.shape()) : std::string("undefined")));
  nn::Shape rows_shape = logits.shape();
  rows_shape.pop_back();
  DTL_REQUIRE_ARG(targets.defined() && targets.dtype() == nn::DType::kI32 && targets.shape() == rows_shape, function,
                  "targets", "must be i32 of shape " + nn::to_string(rows_shape));
  const std::int64_t n = targets.numel();
  const std::int32_t* y = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    DTL_REQUIRE_ARG(y[i] >= 0 && y[i] < vocab_, function, "targets",
                    "holds " + std::to_string(y[i]) + " at index " + std::to_string(i) + ", outside [0, " +
                        std::to_string(vocab_) + ")");
  }
  targets_ = targets;
  detail::ensure(probs_, logits.shape(), logits.dtype());
  const std::size_t rows = static_cast<std::size_t>(n);
  double loss = 0.0;
  // BEGIN SOLUTION(VocabParallelCrossEntropy::forward)
  // | logits holds this rank's vocabulary columns z_r (N, V/T). Add into `loss` the SUM over
  // | the N rows (the line below divides by N) of the softmax cross-entropy of the FULL
  // | logits against targets, without gathering the logits: exactly one all-gather of N f64
  // | values per rank, then one allreduce (kSum) of 2N values (VocabCrossEntropy.* checks the
  // | operations and sizes), computed in double, the same on every rank, finite for logits of
  // | 1000. Keep in probs_ (made above) what backward() needs (Note [Vocabulary parallel],
  // | handout Task C).
  const int parts = tp_.world_size();
  std::vector<double> local_max(rows), all_max(rows * static_cast<std::size_t>(parts));
  std::vector<double> sums(2 * rows, 0.0);  // [S | z_t]
  detail::dispatch_float(logits.dtype(), function, [&](auto zero) {
    using T = decltype(zero);
    const T* z = logits.data<T>();
    for (std::size_t i = 0; i < rows; ++i) {
      const T* zi = z + static_cast<std::int64_t>(i) * vocab_local_;
      local_max[i] = static_cast<double>(*std::max_element(zi, zi + vocab_local_));
    }
  });
  tp_.allgather(local_max.data(), all_max.data(), rows, DType::kF64).wait();
  std::vector<double> row_max(rows, -std::numeric_limits<double>::infinity());
  for (int r = 0; r < parts; ++r) {
    for (std::size_t i = 0; i < rows; ++i) row_max[i] = std::max(row_max[i], all_max[static_cast<std::size_t>(r) * rows + i]);
  }
  detail::dispatch_float(logits.dtype(), function, [&](auto zero) {
    using T = decltype(zero);
    const T* z = logits.data<T>();
    for (std::size_t i = 0; i < rows; ++i) {
      const T* zi = z + static_cast<std::int64_t>(i) * vocab_local_;
      for (std::int64_t j = 0; j < vocab_local_; ++j) sums[i] += std::exp(static_cast<double>(zi[j]) - row_max[i]);
      const std::int64_t local = y[i] - vocab_begin_;
      if (local >= 0 && local < vocab_local_) sums[rows + i] = static_cast<double>(zi[local]);
    }
  });
  tp_.allreduce(sums.data(), 2 * rows, DType::kF64, ReduceOp::kSum).wait();
  detail::dispatch_float(logits.dtype(), function, [&](auto zero) {
    using T = decltype(zero);
    const T* z = logits.data<T>();
    T* p = probs_.data<T>();
    for (std::size_t i = 0; i < rows; ++i) {
      const std::int64_t at = static_cast<std::int64_t>(i) * vocab_local_;
      for (std::int64_t j = 0; j < vocab_local_; ++j) {
        p[at + j] = static_cast<T>(std::exp(static_cast<double>(z[at + j]) - row_max[i]) / sums[i]);
      }
      loss += std::log(sums[i]) + row_max[i] - sums[rows + i];
    }
  });
  // END SOLUTION
  return n > 0 ? loss / static_cast<double>(n) : 0.0;
}

const nn::Tensor& VocabParallelCrossEntropy::backward(double scale) {
  DTL_REQUIRE_ARG(probs_.defined() && targets_.defined(), "VocabParallelCrossEntropy::backward", "this",
                  "has no forward to go back through");
  detail::ensure(dlogits_, probs_.shape(), probs_.dtype());
  // BEGIN SOLUTION(VocabParallelCrossEntropy::backward)
  // | Fill dlogits_ (made above, returned below) with dL/dlogits for this rank's columns (N,
  // | V/T) for the loss scaled by `scale`, equal to those columns of the full layer's
  // | gradient; no communication (Note [Vocabulary parallel]).
  const std::int64_t n = targets_.numel();
  const std::int32_t* y = targets_.data<std::int32_t>();
  detail::dispatch_float(probs_.dtype(), "VocabParallelCrossEntropy::backward", [&](auto zero) {
    using T = decltype(zero);
    const T* p = probs_.data<T>();
    T* d = dlogits_.data<T>();
    const T s = static_cast<T>(scale / static_cast<double>(n > 0 ? n : 1));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t target = y[i] - vocab_begin_;
      for (std::int64_t j = 0; j < vocab_local_; ++j) {
        d[i * vocab_local_ + j] = (p[i * vocab_local_ + j] - (j == target ? T(1) : T(0))) * s;
      }
    }
  });
  // END SOLUTION
  return dlogits_;
}

}  // namespace dtl::lab08
