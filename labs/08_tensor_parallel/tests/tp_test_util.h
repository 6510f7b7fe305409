// What lab 08's tests share: a tensor-parallel group over the test's ranks with
// a record of every collective it was asked for; random layers and inputs (the
// same on every rank); the test's own slicing of full tensors (the oracle of
// which rows or columns a rank must hold, written here independently of the
// lab's code); and comparisons that name the rank, the element, expected and got.
//
// The oracle of every layer test is the unsplit layer of harness/nn, run in one
// process on the whole input inside every rank. Layer tests compute in f64 and
// compare within 1e-11 (1 + |want|): the tensor-parallel layers add the same
// products in another order (partial sums over ranks), nothing else.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/testing/mpi_test.h"
#include "harness/testing/recording_communicator.h"
#include "harness/testing/training_fixtures.h"
#include "lab08/tensor_parallel.h"

namespace lab08_test {

using dtl::testing::comm;
namespace nn = dtl::nn;
namespace lab08 = dtl::lab08;
using dtl::CollectiveKind;

inline constexpr double kTol = 1e-11;  // f64: |got - want| <= kTol (1 + |want|)

/// The tensor-parallel group of a test: the test's ranks behind Open MPI, recorded.
struct Group {
  explicit Group(MPI_Comm ranks) : mpi(ranks, dtl::MpiMode::kNonblocking), record(mpi) {}
  dtl::MpiCommunicator mpi;
  dtl::testing::RecordingCommunicator record;
  int rank() const { return mpi.rank(); }
  int size() const { return mpi.world_size(); }
};

/// Deterministic values in [-1, 1), the same on every rank for the same seed.
inline std::vector<double> random_values(std::int64_t n, std::uint64_t seed) {
  dtl::Rng rng(seed);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = rng.uniform(-1.0, 1.0);
  return v;
}

inline nn::Tensor random_tensor(const nn::Shape& shape, std::uint64_t seed, nn::DType dtype = nn::DType::kF64) {
  const std::vector<double> v = random_values(nn::shape_numel(shape), seed);
  return nn::Tensor::from_values(shape, v, dtype, nn::MemoryCategory::kOther);
}

/// The elements of a float tensor, as doubles.
inline std::vector<double> values(const nn::Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == nn::DType::kF64) {
    for (double x : t.span<double>()) out.push_back(x);
  } else {
    for (float x : t.span<float>()) out.push_back(x);
  }
  return out;
}

/// A Linear layer with random weights and a random (non-zero) bias, the same on every rank.
inline std::unique_ptr<nn::Linear> random_linear(const std::string& name, std::int64_t in, std::int64_t out,
                                                 bool bias, std::uint64_t seed, nn::DType dtype = nn::DType::kF64) {
  dtl::Rng rng(seed);
  auto layer = std::make_unique<nn::Linear>(name, in, out, dtype, rng, 0.5, bias);
  if (bias) layer->bias().value.copy_from(random_tensor({out}, seed + 1, dtype));
  return layer;
}

/// Gives every parameter of a layer random values (LayerNorm's weight 1 and bias 0 would hide mistakes).
inline void randomize(nn::Layer& layer, std::uint64_t seed) {
  for (nn::Parameter* p : layer.parameters()) p->value.copy_from(random_tensor(p->value.shape(), seed++, p->value.dtype()));
}

// ---------------------------------------------------------------------------
// The test's own slicing: which numbers rank r of T must hold
// ---------------------------------------------------------------------------

/// Of a tensor whose first dimension has `groups` blocks: piece r of T of each block, in block order.
/// (A column-parallel weight or bias, a vocabulary slice of an embedding table.)
inline std::vector<double> row_slice(const nn::Tensor& t, int groups, int parts, int r) {
  const std::vector<double> all = values(t);
  const std::int64_t rows = t.dim(0), width = t.numel() / rows;
  const std::int64_t per_group = rows / groups, slice = per_group / parts;
  std::vector<double> out;
  for (int g = 0; g < groups; ++g) {
    const std::int64_t first = g * per_group + r * slice;
    out.insert(out.end(), all.begin() + first * width, all.begin() + (first + slice) * width);
  }
  return out;
}

/// Of a tensor (..., n): columns [r n/T, (r+1) n/T) of the last dimension, row after row.
/// (A row-parallel weight; the activations a column-parallel layer outputs.)
inline std::vector<double> column_slice(const nn::Tensor& t, int parts, int r) {
  const std::vector<double> all = values(t);
  const std::int64_t n = t.dim(-1), rows = t.numel() / n, slice = n / parts;
  std::vector<double> out;
  for (std::int64_t i = 0; i < rows; ++i) {
    out.insert(out.end(), all.begin() + i * n + r * slice, all.begin() + i * n + (r + 1) * slice);
  }
  return out;
}

/// Of the last dimension cut into `groups` blocks: piece r of T of each block, for every row
/// (the output of a column-parallel layer with groups, e.g. qkv).
inline std::vector<double> grouped_column_slice(const nn::Tensor& t, int groups, int parts, int r) {
  const std::vector<double> all = values(t);
  const std::int64_t n = t.dim(-1), rows = t.numel() / n, per_group = n / groups, slice = per_group / parts;
  std::vector<double> out;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (int g = 0; g < groups; ++g) {
      const std::int64_t first = i * n + g * per_group + r * slice;
      out.insert(out.end(), all.begin() + first, all.begin() + first + slice);
    }
  }
  return out;
}

/// A new tensor holding `v` with `shape` (f64).
inline nn::Tensor tensor_of(const nn::Shape& shape, const std::vector<double>& v,
                            nn::DType dtype = nn::DType::kF64) {
  return nn::Tensor::from_values(shape, v, dtype, nn::MemoryCategory::kOther);
}

/// Sequence parallelism's split, the test's own: of a tensor (..., S, C), tokens
/// [r S/T, (r+1) S/T) of every sequence, (..., S/T, C). A 2-D tensor is one sequence.
inline nn::Tensor tokens_of(const nn::Tensor& t, int parts, int r) {
  nn::Shape shape = t.shape();
  const std::int64_t S = shape[shape.size() - 2], C = shape.back();
  const std::int64_t B = t.numel() / (S * C), mine = S / parts;
  shape[shape.size() - 2] = mine;
  const std::vector<double> all = values(t);
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto first = all.begin() + (b * S + r * mine) * C;
    out.insert(out.end(), first, first + mine * C);
  }
  return tensor_of(shape, out, t.dtype());
}

/// The activation bytes (MemoryCategory::kActivations) a block of Residual(Sequential(LayerNorm,
/// ...)) holds after its forward in slot 0, layer by layer.
struct BlockActivations {
  std::int64_t layer_norm = 0;  // split region: y, mean, rstd
  std::int64_t inner = 0;       // the column/row pair and what lies between
  std::int64_t residual = 0;    // split region: x + f(x)
  std::int64_t split() const { return layer_norm + residual; }
  std::int64_t total() const { return layer_norm + inner + residual; }
};

/// Runs the block's forward and then frees its slot layer by layer, last first (so
/// no later layer still holds a handle on an earlier one's output), reading the
/// tracker's activation bytes around each release. Also checks the forward's total.
inline BlockActivations measure_activations(nn::Layer& block, const nn::Tensor& x) {
  auto& tracker = nn::memory_tracker();
  auto current = [&] { return tracker.current(nn::MemoryCategory::kActivations); };
  auto* residual = dynamic_cast<nn::Residual*>(&block);
  auto* seq = residual == nullptr ? nullptr : dynamic_cast<nn::Sequential*>(&residual->inner());
  if (seq == nullptr) throw dtl::InvalidArgument("measure: the block is not a Residual around a Sequential");
  const std::int64_t before = current();
  block.forward(x);
  const std::int64_t after = current();
  BlockActivations a;
  const auto& layers = seq->layers();
  for (std::size_t i = layers.size(); i-- > 0;) {
    const std::int64_t held = current();
    layers[i]->release_slot(0);
    (i == 0 ? a.layer_norm : a.inner) += held - current();
  }
  const std::int64_t held = current();
  block.release_slot(0);
  a.residual = held - current();
  EXPECT_EQ(after - before, a.total()) << "rank " << comm().rank() << ": the forward's activation bytes";
  return a;
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

/// |got - want| <= tol (1 + |want|) everywhere (dtl::testing::close_to()); a failure
/// names the rank, the first wrong element (also per dimension of `shape`, when given),
/// expected against got, and how many differ.
inline ::testing::AssertionResult close_to(const std::vector<double>& want, const std::vector<double>& got,
                                           const std::string& what, double tol = kTol, const nn::Shape& shape = {}) {
  return dtl::testing::close_to(want, got, what, {tol, tol}, "the unsplit layer", 0, shape);
}

/// A description of the recorded operations, for failure messages.
inline std::string describe(const dtl::testing::RecordingCommunicator& record) {
  std::string out;
  for (const auto& op : record.ops()) {
    out += std::string(out.empty() ? "" : ", ") + dtl::collective_name(op.kind) + "(" + std::to_string(op.count) +
           " x " + dtl::dtype_name(op.dtype) + ")";
  }
  return out.empty() ? "no operation" : out;
}

/// The recorded operations are exactly `kinds` with `counts` elements each (OpInfo::count), in order.
inline ::testing::AssertionResult ops_are(const dtl::testing::RecordingCommunicator& record,
                                          const std::vector<CollectiveKind>& kinds,
                                          const std::vector<std::size_t>& counts, const std::string& what) {
  const auto& ops = record.ops();
  bool same = ops.size() == kinds.size();
  for (std::size_t i = 0; same && i < ops.size(); ++i) same = ops[i].kind == kinds[i] && ops[i].count == counts[i];
  if (same) return ::testing::AssertionSuccess();
  std::string want;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    want += std::string(want.empty() ? "" : ", ") + dtl::collective_name(kinds[i]) + "(" + std::to_string(counts[i]) +
            ")";
  }
  return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what << " issued " << describe(record)
                                       << "; the closed form is " << (want.empty() ? "no operation" : want)
                                       << " (See Note [Communication and memory per layer])";
}

/// Whether a call throws dtl::InvalidArgument whose text names every piece of `words`.
template <typename F>
::testing::AssertionResult refused(F&& call, const std::vector<std::string>& words, const std::string& what) {
  try {
    call();
  } catch (const dtl::InvalidArgument& e) {
    for (const std::string& w : words) {
      if (std::string(e.what()).find(w) == std::string::npos) {
        return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what << " was refused, but the "
                                             << "message does not name '" << w << "': " << e.what();
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what
                                         << " threw something else than dtl::InvalidArgument: " << e.what();
  }
  return ::testing::AssertionFailure() << "rank " << comm().rank() << ": " << what << " was not refused";
}

/// The text every refusal of a size must hold: the tensor-parallel rank.
inline std::string tp_rank_words(int r, int parts) {
  return "tensor-parallel rank " + std::to_string(r) + " of " + std::to_string(parts);
}

// ---------------------------------------------------------------------------
// Parameters of a parallel layer or model against the full one's
// ---------------------------------------------------------------------------

/// Which numbers of a full parameter's tensor (value or grad) rank r holds, by the
/// parameter's name: the test's own map of the Megatron split of a GPT.
inline std::vector<double> slice_by_name(const std::string& name, const nn::Tensor& full, int T, int r) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".qkv.weight") || ends(".qkv.bias")) return row_slice(full, 3, T, r);  // [q | k | v] by heads
  if (ends(".fc.weight") || ends(".fc.bias") || ends("wte.weight") || ends("lm_head.weight")) {
    return row_slice(full, 1, T, r);  // column-parallel, vocabulary-parallel
  }
  if (ends(".proj.weight")) return column_slice(full, T, r);  // row-parallel
  return values(full);  // replicated: LayerNorms, row-parallel biases, positions
}

/// Every parameter of `parallel` against this rank's slice of `full`'s (same names, same
/// order): their gradients (grads = true) or their values.
inline ::testing::AssertionResult params_match(const std::vector<nn::Parameter*>& full,
                                               const std::vector<nn::Parameter*>& parallel, bool grads, int T, int r,
                                               const std::string& what, double tol = kTol) {
  if (full.size() != parallel.size()) {
    return ::testing::AssertionFailure() << "rank " << r << ": " << what << " has " << parallel.size()
                                         << " parameters, the unsplit one " << full.size();
  }
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full[i]->name != parallel[i]->name) {
      return ::testing::AssertionFailure() << "rank " << r << ": " << what << "'s parameter " << i << " is '"
                                           << parallel[i]->name << "', expected '" << full[i]->name << "'";
    }
    const nn::Tensor& want = grads ? full[i]->grad : full[i]->value;
    const nn::Tensor& got = grads ? parallel[i]->grad : parallel[i]->value;
    auto ok = close_to(slice_by_name(full[i]->name, want, T, r), values(got),
                       what + ": " + (grads ? "d" : "") + full[i]->name, tol);
    if (!ok) return ok;
  }
  return ::testing::AssertionSuccess();
}

/// Every gradient of a parallel layer against this rank's slice of the full layer's.
inline ::testing::AssertionResult grads_match(nn::Layer& full, nn::Layer& parallel, int T, int r,
                                              const std::string& what, double tol = kTol) {
  return params_match(full.parameters(), parallel.parameters(), true, T, r, what, tol);
}

}  // namespace lab08_test
