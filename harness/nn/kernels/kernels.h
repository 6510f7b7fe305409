/// @file
/// @brief The CUDA side of every layer op: one declaration per op, overloaded on
/// the tag `OnCuda`, beside the CPU kernels (overloaded on `OnCpu`) that live in
/// the layers' .cc files. See Note [One dispatch point] in layer_util.h.
///
/// Each op takes device pointers, runs on `on.stream` (the compute stream,
/// compute_stream.h), returns as soon as its kernels are queued, and checks
/// every launch. f32 only: f64 is the gradient checks' type and stays on the CPU.
/// Shapes: as in the layers (layer_interface.h): N rows, C channels, V vocabulary,
/// B batch, T time, NH heads, hs = C / NH.
///
/// Declared in every build so that the layers compile once; defined in the .cu
/// files next to this header, which are built only where nvcc is (DTL_HAVE_CUDA).
/// Without CUDA no tensor can live on the GPU, so nothing here is ever called.
#pragma once

#include <cstdint>

#include "harness/nn/compute_stream.h"

namespace dtl::nn::kernels {
struct AdamWStep;  // optim_math.cuh
}  // namespace dtl::nn::kernels

namespace dtl::nn::detail {

/// @brief Selects the CPU kernels (the layers' own loops).
struct OnCpu {};
/// @brief Selects the CUDA kernels, queued on `stream`.
struct OnCuda {
  CUstream_st* stream;  ///< the compute stream of the calling thread
};

// ---------------------------------------------------------------------------
// linear.cu: y = x W^T + b through cuBLAS, the bias gradient as a column sum
// ---------------------------------------------------------------------------

/// @brief y (N, out) = x (N, in) W^T (W (out, in)) + b (out; null: no bias).
void linear_forward(OnCuda on, float* y, const float* x, const float* w, const float* b, std::int64_t n,
                    std::int64_t in, std::int64_t out);
/// @brief db (out) += sum over the N rows of dy (N, out).
void linear_backward_bias(OnCuda on, float* db, const float* dy, std::int64_t n, std::int64_t out);
/// @brief dW (out, in) += dy^T (out, N) x (N, in).
void linear_backward_weight(OnCuda on, float* dw, const float* dy, const float* x, std::int64_t n, std::int64_t in,
                            std::int64_t out);
/// @brief dx (N, in) = dy (N, out) W (out, in).
void linear_backward_input(OnCuda on, float* dx, const float* dy, const float* w, std::int64_t n, std::int64_t in,
                           std::int64_t out);

// ---------------------------------------------------------------------------
// elementwise.cu: activations and the residual sum, any shape (count elements)
// ---------------------------------------------------------------------------

/// @brief y = max(x, 0).
void relu_forward(OnCuda on, float* y, const float* x, std::int64_t count);
/// @brief dx = dy where x > 0, else 0.
void relu_backward(OnCuda on, float* dx, const float* x, const float* dy, std::int64_t count);
/// @brief y = gelu(x), tanh approximation.
void gelu_forward(OnCuda on, float* y, const float* x, std::int64_t count);
/// @brief dx = gelu'(x) dy.
void gelu_backward(OnCuda on, float* dx, const float* x, const float* dy, std::int64_t count);
/// @brief y = a + b (a residual connection, forward and backward).
void add(OnCuda on, float* y, const float* a, const float* b, std::int64_t count);

// ---------------------------------------------------------------------------
// bias_gelu.cu: Linear's bias and GELU fused (Note [Fused bias + GELU] there)
// ---------------------------------------------------------------------------

/// @brief Whether a Linear followed by a GELU leaves its bias to the GELU (Note
/// [Fused bias + GELU] in kernels/bias_gelu.cu): on the GPU, yes; on the CPU the two
/// layers run unfused, as they always have.
constexpr bool fuses_bias_gelu(OnCpu) { return false; }
/// @copydoc fuses_bias_gelu(OnCpu)
constexpr bool fuses_bias_gelu(OnCuda) { return true; }

/// @brief g (rows, cols) = gelu(y + b): y the Linear's output without its bias, b (cols).
void bias_gelu_forward(OnCuda on, float* g, const float* y, const float* b, std::int64_t rows, std::int64_t cols);
/// @brief dh (rows, cols) = gelu'(y + b) dg; db (cols) += sum over the rows of dh, in row order.
void bias_gelu_backward(OnCuda on, float* dh, float* db, const float* y, const float* b, const float* dg,
                        std::int64_t rows, std::int64_t cols);

// ---------------------------------------------------------------------------
// layernorm.cu: one warp per row
// ---------------------------------------------------------------------------

/// @brief y (N, C), mean (N), rstd (N) from x (N, C), weight w (C), bias b (C).
void layernorm_forward(OnCuda on, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, std::int64_t n, std::int64_t c);
/// @brief dx (N, C) = ...; dw (C) += sum_n dy norm; db (C) += sum_n dy.
void layernorm_backward(OnCuda on, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, std::int64_t n, std::int64_t c);

// ---------------------------------------------------------------------------
// embedding.cu: gathers and deterministic scatter-adds
// ---------------------------------------------------------------------------

/// @brief y (N, C) = W[tokens] (W (V, C), tokens (N) i32); a token outside [0, V) gives a row of NaN.
void embedding_forward(OnCuda on, float* y, const std::int32_t* tokens, const float* w, std::int64_t n,
                       std::int64_t vocab, std::int64_t c);
/// @brief dW[tokens[i]] += dy[i] for i = 0 .. N-1, in that order (tokens out of range are skipped).
void embedding_backward(OnCuda on, float* dw, const std::int32_t* tokens, const float* dy, std::int64_t n,
                        std::int64_t vocab, std::int64_t c);
/// @brief y (B, T, C) = x + P[t] (P (context, C)).
void positional_forward(OnCuda on, float* y, const float* x, const float* p, std::int64_t batch, std::int64_t seq,
                        std::int64_t c);
/// @brief dP[t] (C) += sum over b of dy (B, T, C).
void positional_backward(OnCuda on, float* dp, const float* dy, std::int64_t batch, std::int64_t seq,
                         std::int64_t c);

// ---------------------------------------------------------------------------
// softmax_xent.cu: softmax and cross-entropy fused, one block per row
// ---------------------------------------------------------------------------

/// @brief probs (N, V) = softmax(logits (N, V)); returns the sum over rows of -log probs[target]
/// and sets *correct to the rows whose argmax is the target.
///
/// The one op that hands numbers to the host: the per-row losses and hits are
/// copied back on the compute stream, and this waits for that stream (Note [The
/// compute stream]). A target outside [0, V) is reported then, as on the CPU.
double softmax_xent_forward(OnCuda on, float* probs, const float* logits, const std::int32_t* targets,
                            std::int64_t n, std::int64_t v, std::int64_t* correct);
/// @brief dlogits (N, V) = (probs - onehot(targets)) * scale / N.
void softmax_xent_backward(OnCuda on, float* dlogits, const float* probs, const std::int32_t* targets, double scale,
                           std::int64_t n, std::int64_t v);

// ---------------------------------------------------------------------------
// attention.cu: causal self-attention's core, strided-batched cuBLAS
// ---------------------------------------------------------------------------

/// @brief att (B, NH, T, T) = causal softmax(q k^T / sqrt(hs)); out (B, T, C) = att v; qkv (B, T, 3C).
void attention_forward(OnCuda on, float* out, float* att, const float* qkv, std::int64_t batch, std::int64_t seq,
                       std::int64_t c, std::int64_t heads);
/// @brief dqkv (B, T, 3C) = the gradient through the core, from dout (B, T, C) (dqkv is overwritten).
void attention_backward(OnCuda on, float* dqkv, const float* dout, const float* att, const float* qkv,
                        std::int64_t batch, std::int64_t seq, std::int64_t c, std::int64_t heads);

// ---------------------------------------------------------------------------
// convert.cu: f32 <-> f16 / bf16 (convert() in tensor.h)
// ---------------------------------------------------------------------------

/// @brief dst[i] = src[i] rounded to dst's type, for kinds 0 = f32, 1 = f16, 2 = bf16 (two different kinds).
/// @return false (nothing launched) for a pair it does not convert.
bool convert_on_gpu(OnCuda on, void* dst, int dst_kind, const void* src, int src_kind, std::int64_t count);

// ---------------------------------------------------------------------------
// optim.cu: one optimizer step over `count` elements of a flat buffer
// ---------------------------------------------------------------------------

/// @brief SGD: g = grad + wd p; m = mu m + g; p -= lr m (m null: p -= lr g).
void sgd_step(OnCuda on, float* p, const float* g, float* m, std::int64_t count, float lr, float momentum,
              float weight_decay);
/// @brief AdamW, one step with the constants in `step` (kernels/optim_math.cuh).
void adamw_step(OnCuda on, float* p, const float* g, float* m, float* v, std::int64_t count,
                const kernels::AdamWStep& step);

}  // namespace dtl::nn::detail
