// Lab 07, given (not a task; compiled into both builds): micro-batch rows and
// views, the text of a schedule, the bubble's closed form, and the WeightStash's
// constructor.
//
// What this file teaches: a micro-batch is a *view* of the batch, not a copy.
// Tensors are contiguous and row-major, so rows [b, b + r) of a (B, ...) tensor
// are one run of elements starting at b * (elements per row).
#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

#include "harness/error.h"
#include "lab07/pipeline.h"

namespace dtl::lab07 {

std::string schedule_string(std::span<const Action> schedule) {
  // An interleaved schedule (some chunk other than 0) shows every action's chunk: "F3[1]".
  const bool chunked = std::any_of(schedule.begin(), schedule.end(), [](const Action& a) { return a.chunk != 0; });
  std::ostringstream out;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    out << (k == 0 ? "" : " ") << static_cast<char>(schedule[k].pass) << schedule[k].micro_batch;
    if (chunked) out << '[' << schedule[k].chunk << ']';
  }
  return out.str();
}

double bubble_fraction(int stages, int micro_batches) {
  DTL_REQUIRE_ARG(stages >= 1, "bubble_fraction", "stages", "must be at least 1, not " + std::to_string(stages));
  DTL_REQUIRE_ARG(micro_batches >= 1, "bubble_fraction", "micro_batches",
                  "must be at least 1, not " + std::to_string(micro_batches));
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

RowRange micro_batch_rows(std::int64_t batch, int micro_batches, int i) {
  DTL_REQUIRE_ARG(batch >= 1, "micro_batch_rows", "batch", "must be at least 1, not " + std::to_string(batch));
  DTL_REQUIRE_ARG(micro_batches >= 1 && micro_batches <= batch, "micro_batch_rows", "micro_batches",
                  "is " + std::to_string(micro_batches) + "; it must be in [1, " + std::to_string(batch) +
                      "] (the batch's rows)");
  DTL_REQUIRE_ARG(i >= 0 && i < micro_batches, "micro_batch_rows", "i",
                  "is " + std::to_string(i) + "; it must be in [0, " + std::to_string(micro_batches) + ")");
  // The first `extra` micro-batches get base + 1 rows, the others base.
  const std::int64_t base = batch / micro_batches;
  const std::int64_t extra = batch % micro_batches;
  const std::int64_t begin = i * base + std::min<std::int64_t>(i, extra);
  return {begin, base + (i < extra ? 1 : 0)};
}

nn::Shape with_rows(nn::Shape shape, std::int64_t rows) {
  DTL_REQUIRE_ARG(!shape.empty(), "with_rows", "shape", "has no dimensions");
  shape[0] = rows;
  return shape;
}

nn::Tensor row_view(const nn::Tensor& t, RowRange range) {
  DTL_REQUIRE_ARG(t.defined() && t.ndim() >= 1, "row_view", "t", "must be a defined tensor with a batch dimension");
  const std::int64_t batch = t.shape()[0];
  DTL_REQUIRE_ARG(range.begin >= 0 && range.rows >= 0 && range.begin + range.rows <= batch, "row_view", "range",
                  "rows [" + std::to_string(range.begin) + ", " + std::to_string(range.begin + range.rows) +
                      ") are not inside the " + std::to_string(batch) + " rows of t");
  const std::int64_t per_row = batch == 0 ? 0 : t.numel() / batch;
  return t.view(range.begin * per_row, with_rows(t.shape(), range.rows));
}

WeightStash::WeightStash(nn::Tensor weights) : weights_(std::move(weights)) {
  DTL_REQUIRE_ARG(weights_.defined() && weights_.dtype() == nn::DType::kF32, "WeightStash", "weights",
                  "must be a defined f32 tensor (the stage's flat values)");
}

}  // namespace dtl::lab07
