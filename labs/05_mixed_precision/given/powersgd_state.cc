// Lab 05, given (not a task; compiled into both builds): PowerSGD's set-up
// around task D (src/powersgd.cc). The layout of a model, the first Q, the
// constructor's checks and state, the byte count, and the hook that puts a
// PowerSgd into a MixedPrecisionTrainer (StepHooks::average). See Note
// [PowerSGD] in lab05/powersgd.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "lab05/mixed.h"
#include "lab05/powersgd.h"
#include "mixed_device.h"
#include "mixed_setup.h"

namespace dtl::lab05 {

std::vector<MatrixShape> matrix_layout(const nn::Model& model) {
  std::vector<MatrixShape> layout;
  for (const nn::Parameter* p : model.parameters()) {
    const nn::Shape& shape = p->value.shape();
    MatrixShape s{shape.empty() ? 1 : shape[0], 1};
    for (std::size_t d = 1; d < shape.size(); ++d) s.cols *= shape[d];
    layout.push_back(s);
  }
  return layout;
}

float initial_q(std::uint64_t seed, std::size_t matrix, std::int64_t row, std::int64_t col) {
  // splitmix64 of the four numbers mixed in turn: the same bits on every machine.
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed);
  h = mix(h ^ static_cast<std::uint64_t>(matrix));
  h = mix(h ^ static_cast<std::uint64_t>(row));
  h = mix(h ^ static_cast<std::uint64_t>(col));
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
}

PowerSgd::PowerSgd(std::vector<MatrixShape> layout, PowerSgdOptions options)
    : layout_(std::move(layout)), options_(options) {
  DTL_REQUIRE_ARG(options_.rank > 0, "PowerSgd", "options.rank",
                  "is " + std::to_string(options_.rank) + ", must be > 0 (it is clamped to min(n, m) per matrix)");
  DTL_REQUIRE_ARG(options_.min_compress_elements >= 0, "PowerSgd", "options.min_compress_elements",
                  "is " + std::to_string(options_.min_compress_elements) + ", must be >= 0");
  DTL_REQUIRE_ARG(options_.warmup_steps >= 0, "PowerSgd", "options.warmup_steps",
                  "is " + std::to_string(options_.warmup_steps) + ", must be >= 0 (0: compress from the first call)");
  DTL_REQUIRE_ARG(options_.power_iterations >= 1, "PowerSgd", "options.power_iterations",
                  "is " + std::to_string(options_.power_iterations) + ", must be >= 1");
  DTL_REQUIRE_ARG(options_.error_reset_period >= 0, "PowerSgd", "options.error_reset_period",
                  "is " + std::to_string(options_.error_reset_period) + ", must be >= 0 (0: never reset)");
  DTL_REQUIRE_ARG(options_.exact_dtype == DType::kF32 || options_.exact_dtype == DType::kBF16, "PowerSgd",
                  "options.exact_dtype", "is " + std::string(dtype_name(options_.exact_dtype)) + ", must be f32 or bf16");
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const MatrixShape s = layout_[i];
    DTL_REQUIRE_ARG(s.rows > 0 && s.cols > 0, "PowerSgd", "layout",
                    "matrix " + std::to_string(i) + " is " + std::to_string(s.rows) + " x " + std::to_string(s.cols) +
                        "; rows and cols must be > 0");
    offsets_.push_back(count_);
    count_ += static_cast<std::size_t>(s.rows * s.cols);
    // The rule of Note [PowerSGD]: vectors and tiny matrices go uncompressed.
    const bool compress = s.rows >= 2 && s.cols >= 2 && s.rows * s.cols >= options_.min_compress_elements;
    const auto r = static_cast<int>(std::min<std::int64_t>(options_.rank, std::min(s.rows, s.cols)));
    ranks_.push_back(compress ? r : 0);
    q_.emplace_back();
    error_.emplace_back();
    if (!compress) continue;
    q_[i].resize(static_cast<std::size_t>(s.cols * r));
    for (std::int64_t row = 0; row < s.cols; ++row) {
      for (std::int64_t col = 0; col < r; ++col) q_[i][static_cast<std::size_t>(row * r + col)] = initial_q(options_.seed, i, row, col);
    }
    error_[i].assign(static_cast<std::size_t>(s.rows * s.cols), 0.0f);
  }
}

std::size_t PowerSgd::bytes_per_step() const noexcept {
  std::size_t elements = 0;
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const MatrixShape s = layout_[i];
    elements += static_cast<std::size_t>(ranks_[i] > 0 ? (s.rows + s.cols) * ranks_[i] * options_.power_iterations
                                                       : s.rows * s.cols);
  }
  return elements * sizeof(float);
}

bool PowerSgd::exact_call(std::int64_t step) const noexcept {
  if (step < options_.warmup_steps) return true;
  const std::int64_t period = options_.error_reset_period;
  return period > 0 && (step - options_.warmup_steps + 1) % period == 0;
}

std::size_t PowerSgd::bytes_at_step(std::int64_t step) const noexcept {
  return exact_call(step) ? count_ * dtype_size(options_.exact_dtype) : bytes_per_step();
}

decltype(StepHooks::average) PowerSgd::hook() {
  return [this](Communicator& backend, void* buf, std::size_t count, DType dtype, DividePlacement) {
    DTL_REQUIRE_ARG(!is_device_pointer(buf), "PowerSgd::hook", "buf", "is on the GPU; PowerSgd runs on the host");
    if (dtype == DType::kF32) return average(backend, static_cast<float*>(buf), count);
    require_half(dtype, "PowerSgd::hook");
    auto* half = static_cast<std::uint16_t*>(buf);
    std::vector<float> wide(count);
    for (std::size_t i = 0; i < count; ++i) wide[i] = widen(dtype, half[i]);
    average(backend, wide.data(), count);
    for (std::size_t i = 0; i < count; ++i) half[i] = narrow(dtype, wide[i]);
  };
}

}  // namespace dtl::lab05
