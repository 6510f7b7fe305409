/// @file
/// @brief The batches the training labs' tests (04-08) cut from the test data sets.
///
/// One argument order everywhere: make_batch(kind, step, global, begin, end) is rows
/// [begin, end) of step `step`'s global batch of `global` rows, so a rank's share and
/// the oracle's whole batch come from the same rows. The MLPs read the spirals, the
/// GPT windows of kContext characters of the corpus (datasets/test_data.h).
#pragma once

#include <cstdint>

#include "datasets/datasets.h"
#include "datasets/test_data.h"
#include "harness/nn/tensor.h"
#include "harness/testing/training_fixtures.h"

namespace dtl::data::testing {

/// @brief The GPT's context (tokens per row) in every lab's tests.
inline constexpr std::int64_t kContext = 8;

/// @brief Rows [begin, end) of step `step`'s global batch of `global` rows.
/// @param[in] kind an MLP (f32 inputs (rows, 2), i32 labels (rows)) or the GPT (i32
///            tokens and next tokens, (rows, kContext) each).
/// @param[in] step the step: its batch starts at row step * global.
/// @param[in] global the rows of a step's global batch.
/// @param[in] begin the first row of the batch, counted from the step's first.
/// @param[in] end one past the last row.
/// @param[in] input_scale multiplies an MLP's inputs (crafted overflows in labs 05, 06).
/// @return the batch. Its tensors are charged to kActivations: a batch lives as long as
///         the step's activations (the layers keep their input for backward), and kOther
///         stays the trainers' own (labs 05 and 06 count their compute copies there exactly).
inline dtl::testing::Batch make_batch(dtl::testing::ModelKind kind, int step, std::int64_t global,
                                      std::int64_t begin, std::int64_t end, float input_scale = 1.0f) {
  namespace nn = dtl::nn;
  const std::int64_t rows = end - begin;
  dtl::testing::Batch b;
  if (kind != dtl::testing::ModelKind::kGpt) {
    b.x = nn::Tensor::zeros({rows, 2}, nn::DType::kF32, nn::MemoryCategory::kActivations);
    b.y = nn::Tensor::zeros({rows}, nn::DType::kI32, nn::MemoryCategory::kActivations);
    copy_rows(spirals(), step * global + begin, b.x.span<float>(), b.y.span<std::int32_t>());
    if (input_scale != 1.0f) {
      for (float& v : b.x.span<float>()) v *= input_scale;
    }
  } else {
    b.x = nn::Tensor::zeros({rows, kContext}, nn::DType::kI32, nn::MemoryCategory::kActivations);
    b.y = nn::Tensor::zeros({rows, kContext}, nn::DType::kI32, nn::MemoryCategory::kActivations);
    copy_windows(corpus(), step * global + begin, kContext, b.x.span<std::int32_t>(), b.y.span<std::int32_t>());
  }
  return b;
}

/// @brief Rank `rank`'s rows of step `step` when `world_size` ranks share the global
/// batch of `global` rows equally: rows [rank b, (rank + 1) b), b = global / world_size.
/// @param[in] kind the model kind (make_batch()).
/// @param[in] step the step.
/// @param[in] global the rows of a step's global batch.
/// @param[in] rank this rank.
/// @param[in] world_size the ranks sharing the batch.
/// @param[in] input_scale multiplies an MLP's inputs.
/// @return make_batch(kind, step, global, rank b, (rank + 1) b, input_scale).
inline dtl::testing::Batch rank_batch(dtl::testing::ModelKind kind, int step, std::int64_t global, int rank,
                                      int world_size, float input_scale = 1.0f) {
  const std::int64_t b = global / world_size;
  return make_batch(kind, step, global, rank * b, (rank + 1) * b, input_scale);
}

}  // namespace dtl::data::testing
