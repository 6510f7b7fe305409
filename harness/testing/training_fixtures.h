/// @file
/// @brief What the training labs' tests (04-09) share: the model and optimizer
/// kinds they sweep, a batch, and the comparisons against an oracle.
///
/// Each of those labs checks distributed training against one process on the same
/// rows (the oracle). The data and the batches cut from it live in
/// datasets/test_batches.h (layers point down: the harness does not know the data
/// sets); the model sizes, the steps and the oracle runs are each lab's own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "harness/nn/tensor.h"

namespace dtl::testing {

/// @brief The models the tests train: harness/nn's MLP (on spirals), an MLP with odd
/// widths (sizes that do not divide evenly), and the tiny GPT (on the character corpus).
/// Each lab picks the kinds it sweeps and their sizes (its own make_model()).
enum class ModelKind { kMlp, kOddMlp, kGpt };

/// @brief The optimizers the tests step with: SGD with momentum, or AdamW.
enum class OptKind { kSgd, kAdamW };

/// @brief The name of a model kind, for test names and messages.
/// @param[in] kind the model kind.
/// @return "mlp", "odd_mlp" or "gpt".
const char* model_name(ModelKind kind);
/// @brief The name of an optimizer kind, for test names and messages.
/// @param[in] kind the optimizer kind.
/// @return "sgd" or "adamw".
const char* opt_name(OptKind kind);
/// @brief How gtest prints a ModelKind parameter (its model_name()).
/// @param[in] kind the model kind.
/// @param[out] os where gtest prints.
void PrintTo(ModelKind kind, std::ostream* os);
/// @brief How gtest prints an OptKind parameter (its opt_name()).
/// @param[in] kind the optimizer kind.
/// @param[out] os where gtest prints.
void PrintTo(OptKind kind, std::ostream* os);

/// @brief A batch: inputs `x` and targets `y` (f32 (rows, 2) and i32 (rows) for an
/// MLP; i32 (rows, T) and i32 (rows, T) for the GPT).
struct Batch {
  nn::Tensor x;  ///< the inputs
  nn::Tensor y;  ///< the targets
};

/// @brief How close a result must be to its oracle: |got - want| <= abs + rel |want|.
///
/// The default, 2e-5 + 1e-4 |want|, fits a few steps of f32 training whose sums run
/// in another order than the oracle's one GEMM: far above rounding, far below any
/// real bug (a missing average is a factor W).
struct Tolerance {
  double abs = 2e-5;  ///< the absolute part
  double rel = 1e-4;  ///< the part relative to |want|
};

/// @brief Whether `got` equals `want` within `tol`, element by element.
///
/// A failure names the rank, `what`, the first element that differs (counting from
/// `offset`; also as one index per dimension when `shape` is given), expected (from
/// `oracle`) against got, how many differ and the largest difference; a NaN never passes.
/// @param[in] want the oracle's values.
/// @param[in] got the values under test.
/// @param[in] what what the values are, for the message.
/// @param[in] tol the tolerance.
/// @param[in] oracle where `want` comes from, for the message ("one process, whole batch").
/// @param[in] offset the index of want[0] in what the message counts (a slice of a flat model).
/// @param[in] shape the values' shape, row-major (empty: flat only; ignored unless its
///            product is the element count).
/// @return success, or a failure with the message above.
::testing::AssertionResult close_to(const std::vector<float>& want, const std::vector<float>& got,
                                    const std::string& what, Tolerance tol = {},
                                    const std::string& oracle = "one process, whole batch", std::int64_t offset = 0,
                                    const std::vector<std::int64_t>& shape = {});
/// @brief close_to() for f64 values.
/// @param[in] want the oracle's values.
/// @param[in] got the values under test.
/// @param[in] what what the values are, for the message.
/// @param[in] tol the tolerance.
/// @param[in] oracle where `want` comes from, for the message.
/// @param[in] offset the index of want[0] in what the message counts.
/// @param[in] shape the values' shape, as for the f32 close_to().
/// @return success, or a failure naming the first element that differs.
::testing::AssertionResult close_to(const std::vector<double>& want, const std::vector<double>& got,
                                    const std::string& what, Tolerance tol = {},
                                    const std::string& oracle = "one process, whole batch", std::int64_t offset = 0,
                                    const std::vector<std::int64_t>& shape = {});

/// @brief The bytes of a tensor's elements (any dtype), for bit-exact comparisons.
/// (Inline: the testing objects link into binaries without harness/nn.)
/// @param[in] t the tensor.
/// @return a copy of its t.bytes() bytes.
inline std::vector<std::uint8_t> bytes_of(const nn::Tensor& t) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(t.bytes()));
  if (!out.empty()) std::memcpy(out.data(), t.raw(), out.size());
  return out;
}

}  // namespace dtl::testing
