// What lab 05's tests share: the models at this lab's sizes (their kinds and batches
// are every training lab's: harness/testing/training_fixtures.h,
// datasets/test_batches.h), the fp32 single-process
// oracle (harness/nn only: no code under test), oracles for the pieces a step
// takes from tasks A and B (the hooks that task C's tests give the trainer),
// the backend, and bit comparisons.
//
// The oracle runs inside every rank on the whole global batch; the run under
// test splits the batch over the ranks (rows [rank b, (rank+1) b)). Since the
// per-rank losses are means over equal row counts, their average is the global
// mean, so the loss curves are comparable step by step.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_batches.h"
#include "datasets/test_data.h"
#include "harness/comm/communicator.h"
#include "harness/nn/half.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/training_fixtures.h"
#include "lab05/mixed.h"

namespace lab05_test {

using dtl::testing::comm;
namespace nn = dtl::nn;
namespace lab05 = dtl::lab05;

inline constexpr std::int64_t kGlobalBatch = 24;  // divisible by 1, 2, 3, 4 and 6
inline constexpr std::int64_t kChannels = 16;

// The shared fixtures (harness/testing/training_fixtures.h, datasets/test_batches.h).
using dtl::testing::Batch;
using dtl::testing::bytes_of;
using dtl::testing::ModelKind;
using dtl::testing::model_name;
using dtl::data::testing::corpus;  // datasets/test_data.h: the same rows in every lab's tests
using dtl::data::testing::kContext;
using dtl::data::testing::make_batch;
using dtl::data::testing::rank_batch;
using dtl::data::testing::spirals;

inline void PrintTo(lab05::Precision p, std::ostream* os) { *os << lab05::precision_name(p); }

inline nn::Model make_model(ModelKind kind, std::uint64_t seed) {
  if (kind == ModelKind::kMlp) return nn::make_mlp(2, 32, 3, 2, seed);
  return nn::make_gpt(static_cast<std::int64_t>(corpus().vocab.size()), kContext, kChannels, 2, 2, seed);
}

// eps 1e-2, not AdamW's default 1e-8: with a tiny eps the update m / (sqrt(v) + eps)
// does not depend on the gradient's size, so a forgotten unscale (gradients S times
// too large) would not show in the loss. With eps comparable to the gradients it does.
inline const nn::AdamWOptions kAdamW{.lr = 3e-3f, .eps = 1e-2f, .weight_decay = 0.0f};

/// The oracle: one process, fp32, the whole batch, `steps` steps of AdamW; the loss of each step.
inline std::vector<double> fp32_losses(ModelKind kind, std::uint64_t seed, int steps) {
  nn::Model model = make_model(kind, seed);
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params);
  const nn::Tensor grads = nn::flatten_grads(params);
  nn::AdamW adam(kAdamW, values.numel());
  nn::SoftmaxCrossEntropy ce;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, kGlobalBatch, 0, kGlobalBatch);
    model.zero_grad();
    losses.push_back(ce.forward(model.forward(b.x), b.y));
    model.backward(ce.backward());
    adam.step(values.span<float>(), grads.span<float>());
  }
  return losses;
}

/// The backend every test uses: Open MPI with the 16-bit sum of task A.
inline std::unique_ptr<dtl::Communicator> backend() { return lab05::make_communicator("mpi-half", comm()); }

// ---------------------------------------------------------------------------
// Oracles for what a step takes from tasks A and B (lab05::StepHooks), written
// here with harness/nn and the vendor MPI only: the grading tests of task C run
// the trainer with these, so a fault in task A or B costs that task's items only.
// ---------------------------------------------------------------------------

/// One element of a f16, bf16 or f32 tensor, widened exactly to float.
inline float element(const nn::Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case nn::DType::kF16: return static_cast<float>(t.data<nn::f16>()[i]);
    case nn::DType::kBF16: return static_cast<float>(t.data<nn::bf16>()[i]);
    default: return t.data<float>()[i];
  }
}

/// round_to_half()'s contract: nn::convert's rounding, and the counts from the
/// fp32 input and the rounded output.
inline lab05::RoundStats oracle_round(const nn::Tensor& dst, const nn::Tensor& src) {
  if (dst.raw() != src.raw()) nn::convert(dst, src);
  lab05::RoundStats stats;
  stats.count = src.numel();
  for (std::int64_t i = 0; i < src.numel(); ++i) {
    const float v = src.data<float>()[i], r = element(dst, i);
    if (!std::isfinite(v)) continue;
    if (v != 0.0f) {
      ++stats.nonzero;
      stats.underflow += r == 0.0f;
    }
    stats.overflow += std::isinf(r);
  }
  return stats;
}

/// A 16-bit average with one rounding of an fp32 sum: every rank's values by the
/// vendor MPI_Allgather, then per element, in rank order, pre-divide:
/// round16(sum_r round16(x_r / W)); post-divide: round16(round16(sum_r x_r) / W).
/// (allreduce_mean_half() rounds once per reduction step instead: the same
/// bits on exact data, a few 16-bit ulps apart otherwise.)
inline void oracle_average(dtl::Communicator&, void* buf, std::size_t count, dtl::DType dtype,
                           lab05::DividePlacement placement) {
  const int w = comm().size();
  if (w == 1 || count == 0) return;
  auto widen = [dtype](std::uint16_t b) {
    return dtype == dtl::DType::kF16 ? nn::f16_bits_to_float(b) : nn::bf16_bits_to_float(b);
  };
  auto round16 = [dtype](float v) {
    return dtype == dtl::DType::kF16 ? nn::float_to_f16_bits(v) : nn::float_to_bf16_bits(v);
  };
  auto* mine = static_cast<std::uint16_t*>(buf);
  std::vector<std::uint16_t> all(count * static_cast<std::size_t>(w));
  MPI_Allgather(mine, static_cast<int>(count), MPI_UINT16_T, all.data(), static_cast<int>(count), MPI_UINT16_T,
                comm());
  const float divisor = static_cast<float>(w);
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (std::size_t r = 0; r < static_cast<std::size_t>(w); ++r) {
      const float x = widen(all[r * count + i]);
      sum += placement == lab05::DividePlacement::kPre ? widen(round16(x / divisor)) : x;
    }
    mine[i] = placement == lab05::DividePlacement::kPre ? round16(sum) : round16(widen(round16(sum)) / divisor);
  }
}

/// GradScaler, written again: out = float(g) * (1/S) in fp32, the found-inf flag
/// agreed by the vendor MPI_Allreduce (MPI_LOR), and the scale's state machine.
class OracleScaler final : public lab05::LossScaler {
 public:
  using LossScaler::LossScaler;
  bool unscale_and_check(dtl::Communicator&, const nn::Tensor& grads, const nn::Tensor& out) override {
    const float inv = 1.0f / scale_;
    int found = 0;
    for (std::int64_t i = 0; i < grads.numel(); ++i) {
      const float v = element(grads, i) * inv;
      out.data<float>()[i] = v;
      found |= std::isfinite(v) ? 0 : 1;
    }
    int any = 0;
    MPI_Allreduce(&found, &any, 1, MPI_INT, MPI_LOR, comm());
    return any != 0;
  }
  void update(bool found_inf) override {
    const bool dynamic = options_.mode == lab05::ScalingMode::kDynamic;
    if (found_inf) {
      ++skipped_;
      clean_steps_ = 0;
      if (dynamic) scale_ *= options_.backoff_factor;
    } else if (++clean_steps_ == options_.growth_interval) {
      clean_steps_ = 0;
      if (dynamic) scale_ *= options_.growth_factor;
    }
  }
};

/// The three oracles as a trainer's hooks.
inline lab05::StepHooks oracle_hooks() {
  lab05::StepHooks hooks;
  hooks.round = oracle_round;
  hooks.average = oracle_average;
  hooks.make_scaler = [](const lab05::LossScalerOptions& o) { return std::make_unique<OracleScaler>(o); };
  return hooks;
}

/// Whether `mine` equals rank 0's bytes, on this rank (collective: a broadcast of rank 0's).
inline ::testing::AssertionResult same_as_rank0(const std::vector<std::uint8_t>& mine, const std::string& what) {
  std::vector<std::uint8_t> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_BYTE, 0, comm());
  if (root == mine) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < mine.size() && mine[i] == root[i]) ++i;
  return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what << " differs from rank 0's at byte "
                                       << i << " of " << mine.size();
}

}  // namespace lab05_test
