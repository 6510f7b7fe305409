/// @file
/// @brief The transformer's pieces: multi-head causal self-attention (and its
/// core without the projections), and the residual blocks a GPT is built from
/// (attention block, MLP block).
/// Conventions: see layer_interface.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/nn/dense.h"
#include "harness/nn/layer_interface.h"
#include "harness/random.h"

namespace dtl::nn {

// ---------------------------------------------------------------------------
// Causal self-attention
// ---------------------------------------------------------------------------

/// @brief Multi-head causal self-attention with its two projections.
///
/// x (B, T, C) -> qkv = Linear(C, 3C) -> (B, T, 3C), split into q, k, v, each
/// (B, T, NH, hs); per head, att = softmax(q k^T / sqrt(hs)) with position t
/// seeing only t2 <= t (causal), (B, NH, T, T); out = att v, heads side by side
/// (B, T, C); y = Linear(C, C)(out). Parameters: qkv.weight, qkv.bias,
/// proj.weight, proj.bias. The attention itself is loops, as in llm.c.
class CausalSelfAttention : public Layer {
 public:
  /// @brief Attention over `channels` with `heads` heads.
  /// @param[in] name the layer's name; sublayers name.qkv and name.proj.
  /// @param[in] channels C, a multiple of heads.
  /// @param[in] heads NH.
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in,out] rng draws the weights (qkv first, then proj).
  /// @param[in] init_std the qkv weights' standard deviation.
  /// @param[in] proj_std the proj weights' standard deviation (GPT-2 scales it by 1/sqrt(2 layers)).
  /// @throws dtl::InvalidArgument if channels is not a positive multiple of heads.
  CausalSelfAttention(std::string name, std::int64_t channels, std::int64_t heads, DType dtype,
                      Rng& rng, double init_std = 0.02, double proj_std = 0.02);
  /// @brief "CausalSelfAttention".
  /// @return the kind.
  std::string kind() const override { return "CausalSelfAttention"; }
  /// @brief y (B, T, C) from x (B, T, C).
  /// @param[in] x (B, T, C).
  /// @return y (B, T, C).
  const Tensor& forward(const Tensor& x) override;
  /// @brief Backward through proj, the attention, then qkv.
  /// @param[in] dy (B, T, C).
  /// @param[in] grad_ready fired for proj.bias, proj.weight, qkv.bias, qkv.weight.
  /// @return dx (B, T, C).
  const Tensor& backward(const Tensor& dy, const GradReadyFn& grad_ready) override;
  /// @brief B: proj's B, the attention's backward, qkv's B (Note [Split backward]).
  /// @param[in] dy (B, T, C).
  /// @return dx (B, T, C).
  const Tensor& backward_input(const Tensor& dy) override;
  /// @brief W: proj's W, then qkv's.
  /// @param[in] grad_ready fired for proj.bias, proj.weight, qkv.bias, qkv.weight.
  void backward_weight(const GradReadyFn& grad_ready) override;
  /// @brief qkv.weight, qkv.bias, proj.weight, proj.bias.
  /// @return the parameters.
  std::vector<Parameter*> parameters() override;
  /// @brief The same shape.
  /// @param[in] input (B, T, C).
  /// @return input.
  Shape output_shape(const Shape& input) const override;
  /// @brief Selects the slot here and in both projections.
  /// @param[in] slot the slot.
  void set_slot(int slot) override;
  /// @brief Frees the caches of one slot here and in both projections.
  /// @param[in] slot the slot.
  void release_slot(int slot) override;
  /// @brief The number of heads.
  /// @return NH.
  std::int64_t heads() const noexcept { return heads_; }
  /// @brief The input projection, Linear(C, 3C): rows [q | k | v], each C rows, heads side by side.
  /// @return the layer (lab 08 shards it by heads).
  Linear& qkv() noexcept { return qkv_; }
  /// @brief The output projection, Linear(C, C).
  /// @return the layer (lab 08 shards it by input features).
  Linear& proj() noexcept { return proj_; }

 private:
  struct Cache {
    Tensor qkv, att, out, dqkv;
  };
  std::int64_t channels_, heads_;
  Linear qkv_, proj_;
  SlotCaches<Cache> caches_;
};

/// @brief The attention core without its projections: per head, a causal softmax of
/// q k^T / sqrt(hs) applied to v. CausalSelfAttention runs it between qkv and proj;
/// lab 08 runs it on the heads one rank holds.
/// @param[in] qkv (B, T, 3C'): q, k and v side by side, each (B, T, NH', hs), C' = NH' hs.
/// @param[in] heads NH', dividing C'.
/// @param[out] att (B, NH', T, T): the attention weights, zero above the diagonal (kept for backward).
/// @param[out] out (B, T, C'): the heads' outputs side by side.
/// @throws dtl::InvalidArgument on mismatched shapes or dtypes (f32 or f64, all the same).
void attention_core_forward(const Tensor& qkv, std::int64_t heads, const Tensor& att, const Tensor& out);

/// @brief The backward of attention_core_forward(): dqkv = d(out)/d(qkv)^T dout.
/// @param[in] dout (B, T, C').
/// @param[in] att the forward's attention weights, (B, NH', T, T).
/// @param[in] qkv the forward's input, (B, T, 3C').
/// @param[in] heads NH'.
/// @param[out] dqkv (B, T, 3C'), overwritten.
/// @throws dtl::InvalidArgument on mismatched shapes or dtypes.
void attention_core_backward(const Tensor& dout, const Tensor& att, const Tensor& qkv, std::int64_t heads,
                             const Tensor& dqkv);

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

/// @brief The activation of an MLP block.
enum class Activation { kReLU, kGELU };

/// @brief A residual MLP block: y = x + Linear(hidden, C)(act(Linear(C, hidden)(LayerNorm(x)))).
/// x and y are (N..., C). Sublayers name.ln, name.fc, name.act, name.proj.
/// @param[in] name the block's name.
/// @param[in] channels C.
/// @param[in] hidden the inner width (GPT: 4C).
/// @param[in] activation ReLU or GELU.
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @param[in,out] rng draws fc's weights, then proj's.
/// @param[in] init_std fc's weight standard deviation (<= 0: uniform +-1/sqrt(fan-in)).
/// @param[in] proj_std proj's weight standard deviation (<= 0: uniform).
/// @return the block (a Residual around a Sequential).
std::unique_ptr<Layer> make_mlp_block(const std::string& name, std::int64_t channels,
                                      std::int64_t hidden, Activation activation, DType dtype,
                                      Rng& rng, double init_std = 0.02, double proj_std = 0.02);

/// @brief A residual attention block: y = x + CausalSelfAttention(LayerNorm(x)). x and y are (B, T, C).
/// Sublayers name.ln and name.attn.
/// @param[in] name the block's name.
/// @param[in] channels C.
/// @param[in] heads NH (divides C).
/// @param[in] dtype DType::kF32 or DType::kF64.
/// @param[in,out] rng draws the weights.
/// @param[in] init_std qkv's weight standard deviation.
/// @param[in] proj_std proj's weight standard deviation.
/// @return the block (a Residual around a Sequential).
std::unique_ptr<Layer> make_attention_block(const std::string& name, std::int64_t channels,
                                            std::int64_t heads, DType dtype, Rng& rng,
                                            double init_std = 0.02, double proj_std = 0.02);

}  // namespace dtl::nn
