/// @file
/// @brief Model: a sequence of units, with the hook points labs 04–07 attach to;
/// flat parameter and gradient buffers; pipeline stages; make_mlp and make_gpt.
///
/// What this file teaches: a model is a list of *units* — named groups of
/// layers such as "embed", "block0", "block1", "head". The unit is the grain
/// at which the distributed labs work:
///   - lab 04 (DDP) listens to `grad_ready`: during backward, each parameter is
///     announced as soon as its gradient is final, in reverse parameter order,
///     so gradient buckets can be reduced while backward goes on;
///   - lab 06 (FSDP) uses `pre_forward`/`post_forward`/`pre_backward`/
///     `post_backward` per unit to gather a unit's parameters just before it
///     runs and free them just after;
///   - lab 07 (pipeline) cuts the units into contiguous stages
///     (split_stages(), slice()) and keeps one activation slot per micro-batch;
///   - all of them use flat buffers: flatten_values()/flatten_grads() move a list
///     of parameters into one contiguous tensor and leave each Parameter a view
///     into it, so a bucket, a shard or a whole model is one span of floats.
///
/// Hook order for one forward and backward of a model with units 0..U-1:
///
///     pre_forward(0) post_forward(0) ... pre_forward(U-1) post_forward(U-1)
///     pre_backward(U-1) grad_ready(last parameter of U-1) ... post_backward(U-1)
///     ... pre_backward(0) ... grad_ready(first parameter of 0) post_backward(0)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/nn/layers.h"

namespace dtl::nn {

/// @brief A named group of layers run one after another: the grain of hooks, flat buffers and stages.
struct Unit {
  std::string name;                            ///< e.g. "block0"
  std::vector<std::unique_ptr<Layer>> layers;  ///< in forward order

  /// @brief The unit's parameters, in forward order.
  /// @return pointers into the layers.
  std::vector<Parameter*> parameters() const;
};

/// @brief Callbacks a Model calls during forward and backward; empty ones are skipped.
struct ModelHooks {
  std::function<void(int unit)> pre_forward;    ///< before unit `unit` runs forward
  std::function<void(int unit)> post_forward;   ///< after unit `unit` ran forward
  std::function<void(int unit)> pre_backward;   ///< before unit `unit` runs backward
  std::function<void(int unit)> post_backward;  ///< after unit `unit` ran backward
  GradReadyFn grad_ready;  ///< a parameter's gradient is final; reverse parameter order
};

/// @brief One pipeline stage: units [begin, end) and the activation shapes at its two edges.
struct Stage {
  int begin = 0;                        ///< first unit
  int end = 0;                          ///< one past the last unit
  Shape input_shape;                    ///< what the stage receives (the model input for stage 0)
  Shape output_shape;                   ///< what the stage sends on (the model output for the last)
  std::int64_t parameter_count = 0;     ///< parameters in the stage
};

/// @brief A sequence of units with explicit forward and backward and the hooks above.
class Model {
 public:
  /// @brief An empty model whose layers compute in `dtype`.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  explicit Model(DType dtype = DType::kF32) : dtype_(dtype) {}
  /// @brief Moves a model (units, hooks and flat buffers).
  Model(Model&&) noexcept = default;
  /// @brief Moves a model.
  /// @return *this.
  Model& operator=(Model&&) noexcept = default;

  /// @brief Appends a unit.
  /// @param[in] name the unit's name.
  /// @param[in] layers its layers, in forward order (at least one).
  /// @throws dtl::InvalidArgument if layers is empty, holds a null, or the model was flattened.
  void add_unit(std::string name, std::vector<std::unique_ptr<Layer>> layers);
  /// @brief The number of units.
  /// @return the count.
  int unit_count() const noexcept { return static_cast<int>(units_.size()); }
  /// @brief One unit.
  /// @param[in] i in [0, unit_count()).
  /// @return the unit.
  /// @throws dtl::InvalidArgument if i is out of range.
  Unit& unit(int i);
  /// @brief The dtype the layers compute in.
  /// @return the dtype.
  DType dtype() const noexcept { return dtype_; }

  /// @brief Runs every unit's forward, with pre_forward/post_forward around each.
  /// @param[in] x the input of unit 0 (MLP: (B, in) floats; GPT: (B, T) i32 tokens).
  /// @return the last unit's output (MLP: (B, classes); GPT: (B, T, V) logits).
  const Tensor& forward(const Tensor& x);
  /// @brief Runs every unit's backward, last unit first, with pre_backward/post_backward
  /// around each and grad_ready for each parameter; gradients are *added* to grad.
  /// @param[in] dy dL/d(output), the shape of forward's result.
  /// @return dL/dx (undefined for token inputs).
  const Tensor& backward(const Tensor& dy);
  /// @brief B of the whole model (Note [Split backward] in layer_interface.h): every
  /// unit's backward_input(), last unit first; adds no gradient of a layer that splits.
  ///
  /// Call backward_weight() for the same slot later, once. No hook runs here.
  /// @param[in] dy dL/d(output), the shape of forward's result.
  /// @return dL/dx (undefined for token inputs).
  /// @throws dtl::InvalidArgument if pre_backward or post_backward hooks are set
  ///         (they bracket a unit's whole backward, which no longer happens at one time).
  const Tensor& backward_input(const Tensor& dy);
  /// @brief W of the whole model: every unit's backward_weight(), last unit first, with
  /// grad_ready for each parameter in backward()'s order. Together with
  /// backward_input() of the same slot, adds exactly backward()'s gradients.
  /// @throws dtl::InvalidArgument if pre_backward or post_backward hooks are set, or
  ///         the slot has no backward_input() waiting for its W.
  void backward_weight();
  /// @brief The hooks; assign the members to attach.
  /// @return the hooks.
  ModelHooks& hooks() noexcept { return hooks_; }

  /// @brief Every parameter, unit by unit, in forward order.
  /// @return pointers into the layers.
  std::vector<Parameter*> parameters() const;
  /// @brief The total number of parameter elements.
  /// @return the count.
  std::int64_t parameter_count() const;
  /// @brief Sets every gradient to zero.
  void zero_grad() const;

  /// @brief Moves every parameter (value and grad) to `device`; the layers then compute there.
  ///
  /// Each tensor is copied into new storage on `device`, charged to the same
  /// category on that device's tracker, and the old storage is freed. After
  /// `model.to(Device::kCuda)` the model takes device inputs (floats, or i32
  /// tokens) and gives device outputs; see Note [One dispatch point] in
  /// layer_util.h. Flatten after moving: flat buffers live where the parameters do.
  /// @param[in] device where the parameters go (kCpu to bring them back).
  /// @throws dtl::InvalidArgument if the model was flattened.
  void to(Device device);

  /// @brief Moves every parameter value into one flat buffer (see dtl::nn::flatten_values()).
  /// @param[in] pad_multiple the flat length is rounded up to a multiple of this (zeros).
  /// @return the flat buffer, (count rounded up).
  const Tensor& flatten_values(std::int64_t pad_multiple = 1);
  /// @brief Moves every gradient into one flat buffer (see dtl::nn::flatten_grads()).
  /// @param[in] pad_multiple the flat length is rounded up to a multiple of this.
  /// @return the flat buffer.
  const Tensor& flatten_grads(std::int64_t pad_multiple = 1);
  /// @brief The flat parameter buffer (undefined before flatten_values()).
  /// @return the buffer.
  const Tensor& flat_values() const noexcept { return flat_values_; }
  /// @brief The flat gradient buffer (undefined before flatten_grads()).
  /// @return the buffer.
  const Tensor& flat_grads() const noexcept { return flat_grads_; }

  /// @brief The shape after each unit, for an input shape, without computing.
  /// @param[in] input the model's input shape.
  /// @return unit_count() + 1 shapes: the input, then each unit's output.
  std::vector<Shape> activation_shapes(const Shape& input) const;
  /// @brief Cuts the units into `stages` contiguous, non-empty stages, minimising
  /// the largest stage's cost (by default its parameter count).
  /// @param[in] stages the number of stages, in [1, unit_count()].
  /// @param[in] input the model's input shape (gives each stage's edge shapes).
  /// @param[in] costs optional cost per unit (e.g. measured times); empty: parameter counts.
  /// @return the stages, in order.
  /// @throws dtl::InvalidArgument if stages is out of range or costs has the wrong size.
  std::vector<Stage> split_stages(int stages, const Shape& input, std::span<const double> costs = {}) const;
  /// @brief A new model made of units [begin, end), moved out of this one (which is left empty).
  /// Build the full model with the same seed on every rank, then keep your stage.
  /// @param[in] begin first unit.
  /// @param[in] end one past the last unit.
  /// @return the stage as a model (no hooks).
  /// @throws dtl::InvalidArgument on a bad range, or if the model was already flattened.
  Model slice(int begin, int end) &&;

  /// @brief Selects the activation slot of every layer (one slot per micro-batch in flight).
  /// @param[in] slot >= 0.
  void set_slot(int slot);
  /// @brief Frees the activations of one slot in every layer.
  /// @param[in] slot the slot.
  void release_slot(int slot);

 private:
  DType dtype_;
  std::vector<Unit> units_;
  ModelHooks hooks_;
  Tensor flat_values_, flat_grads_;
};

/// @brief Moves the values of `params` into one new flat buffer and rebinds each
/// value to a view of it; the old storages are freed. No copies afterwards: a
/// write through the flat buffer is a write to the parameter and vice versa.
///
/// Parameter i occupies [offset_i, offset_i + numel_i) with offset_0 = 0 and
/// offset_{i+1} = offset_i + numel_i (read it back as value.offset()). The
/// length is rounded up to a multiple of `pad_multiple` with zeros (lab 06 pads
/// to a multiple of the world size).
/// @param[in] params the parameters, all of one dtype and on the CPU.
/// @param[in] pad_multiple >= 1.
/// @param[in] category what the flat buffer is charged to.
/// @return the flat buffer, 1-D.
/// @throws dtl::InvalidArgument on mixed dtypes or pad_multiple < 1.
Tensor flatten_values(std::span<Parameter* const> params, std::int64_t pad_multiple = 1,
                      MemoryCategory category = MemoryCategory::kParameters);

/// @brief The same for the gradients: each grad becomes a view into one flat buffer.
/// @param[in] params the parameters, all of one dtype and on the CPU.
/// @param[in] pad_multiple >= 1.
/// @param[in] category what the flat buffer is charged to.
/// @return the flat buffer, 1-D.
/// @throws dtl::InvalidArgument on mixed dtypes or pad_multiple < 1.
Tensor flatten_grads(std::span<Parameter* const> params, std::int64_t pad_multiple = 1,
                     MemoryCategory category = MemoryCategory::kGradients);

/// @brief An MLP classifier: units "fc0".."fc{depth-1}" = Linear + ReLU, then "head" = Linear.
///
/// x is (B, in); fc0 maps it to (B, hidden), each further fc keeps (B, hidden),
/// head gives logits (B, classes). Weights uniform +-1/sqrt(fan-in), biases 0.
/// @param[in] in input features.
/// @param[in] hidden width of the hidden layers.
/// @param[in] classes output classes.
/// @param[in] depth number of hidden layers, >= 1.
/// @param[in] seed the initialization seed (same seed, same weights, on every rank).
/// @param[in] dtype DType::kF32 (training) or DType::kF64 (gradient checks).
/// @return the model.
/// @throws dtl::InvalidArgument on a size < 1.
Model make_mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, int depth, std::uint64_t seed,
               DType dtype = DType::kF32);

/// @brief A tiny GPT-2: units "embed", "block0".."block{layers-1}", "head".
///
/// embed: tokens (B, T) -> Embedding (V, C) + PositionalEmbedding (context, C) -> (B, T, C);
/// block i: x + attn(LayerNorm(x)), then x + mlp(LayerNorm(x)) with a GELU MLP of width 4C;
/// head: LayerNorm, Linear(C, V) without bias -> logits (B, T, V). Weights N(0, 0.02), the
/// residual projections N(0, 0.02/sqrt(2 layers)); biases 0; LayerNorm weight 1. No weight tying
/// (the embedding and the head live in different units, so they can live on different ranks).
/// @param[in] vocab V.
/// @param[in] context the longest sequence T.
/// @param[in] channels C.
/// @param[in] heads NH, divides C.
/// @param[in] layers number of blocks, >= 1.
/// @param[in] seed the initialization seed.
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @return the model.
/// @throws dtl::InvalidArgument on a bad size.
Model make_gpt(std::int64_t vocab, std::int64_t context, std::int64_t channels, std::int64_t heads, int layers,
               std::uint64_t seed, DType dtype = DType::kF32);

}  // namespace dtl::nn
