// CausalSelfAttention (forward and backward) and the residual blocks.
// Written out as loops over raw pointers (llm.c style). Each CPU kernel is a
// template over the element type T (float for training, double for the
// gradient checks) tagged OnCpu; kernels/attention.cu holds the OnCuda one.
// See Note [One dispatch point] in layer_util.h.
#include "harness/nn/transformer.h"

#include <cmath>

#include "harness/nn/layer_util.h"
#include "harness/nn/normalization.h"

namespace dtl::nn {

using namespace detail;  // dispatch_float, require_input, ensure, notify, ...

namespace {

// ---------------------------------------------------------------------------
// Kernels; each function says the shape of every pointer.
// ---------------------------------------------------------------------------

// Attention core. qkv (B, T, 3C) holds q, k, v side by side; att (B, NH, T, T);
// out (B, T, C). Position t attends to t2 <= t only; att[.., t, t2 > t] stays 0.
template <typename T>
void attention_forward(OnCpu, T* out, T* att, const T* qkv, std::int64_t batch, std::int64_t seq, std::int64_t c,
                       std::int64_t heads) {
  const std::int64_t hs = c / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* q = qkv + (b * seq + t) * 3 * c + h * hs;
        T* a = att + ((b * heads + h) * seq + t) * seq;
        // scores q . k(t2) / sqrt(hs), and their max (for a stable softmax)
        T maxval = -INFINITY;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* k = qkv + (b * seq + t2) * 3 * c + c + h * hs;
          T dot = 0;
          for (std::int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          a[t2] = dot * scale;
          if (a[t2] > maxval) maxval = a[t2];
        }
        T sum = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - maxval);
          sum += a[t2];
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) a[t2] /= sum;
        for (std::int64_t t2 = t + 1; t2 < seq; ++t2) a[t2] = 0;
        // out = sum_t2 att[t2] v(t2)
        T* o = out + (b * seq + t) * c + h * hs;
        for (std::int64_t i = 0; i < hs; ++i) o[i] = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          for (std::int64_t i = 0; i < hs; ++i) o[i] += a[t2] * v[i];
        }
      }
    }
  }
}

// dqkv (B, T, 3C) += from dout (B, T, C), given att (B, NH, T, T) and qkv.
// Per (b, t, h): datt[t2] = dout . v(t2); dv(t2) += att[t2] dout;
// softmax backward: dpre[t2] = att[t2] (datt[t2] - sum_t3 att[t3] datt[t3]);
// dq += dpre[t2] k(t2) / sqrt(hs); dk(t2) += dpre[t2] q / sqrt(hs).
template <typename T>
void attention_backward(OnCpu, T* dqkv, const T* dout, const T* att, const T* qkv, std::int64_t batch,
                        std::int64_t seq, std::int64_t c, std::int64_t heads) {
  const std::int64_t hs = c / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  std::vector<T> datt(static_cast<std::size_t>(seq));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* a = att + ((b * heads + h) * seq + t) * seq;
        const T* dout_t = dout + (b * seq + t) * c + h * hs;
        const T* q = qkv + (b * seq + t) * 3 * c + h * hs;
        T* dq = dqkv + (b * seq + t) * 3 * c + h * hs;
        T weighted = 0;  // sum_t2 att[t2] datt[t2]
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T* v = qkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          T* dv = dqkv + (b * seq + t2) * 3 * c + 2 * c + h * hs;
          T d = 0;
          for (std::int64_t i = 0; i < hs; ++i) {
            d += dout_t[i] * v[i];
            dv[i] += a[t2] * dout_t[i];
          }
          datt[static_cast<std::size_t>(t2)] = d;
          weighted += a[t2] * d;
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const T dpre = a[t2] * (datt[static_cast<std::size_t>(t2)] - weighted) * scale;
          const T* k = qkv + (b * seq + t2) * 3 * c + c + h * hs;
          T* dk = dqkv + (b * seq + t2) * 3 * c + c + h * hs;
          for (std::int64_t i = 0; i < hs; ++i) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
  }
}

// The shapes attention_core_forward() and _backward() need, checked once.
void require_core_shapes(const Tensor& qkv, std::int64_t heads, const Tensor& att, const Tensor& out,
                         const char* function) {
  DTL_REQUIRE_ARG(qkv.defined() && qkv.ndim() == 3 && qkv.dim(2) % 3 == 0, function, "qkv",
                  "must be (B, T, 3C), not " + (qkv.defined() ? to_string(qkv.shape()) : std::string("undefined")));
  const std::int64_t batch = qkv.dim(0), seq = qkv.dim(1), c = qkv.dim(2) / 3;
  DTL_REQUIRE_ARG(heads >= 1 && c % heads == 0, function, "heads",
                  "is " + std::to_string(heads) + "; it must divide C = " + std::to_string(c));
  DTL_REQUIRE_ARG(att.defined() && att.shape() == Shape({batch, heads, seq, seq}) && att.dtype() == qkv.dtype(),
                  function, "att", "must be (B, NH, T, T) of qkv's dtype");
  DTL_REQUIRE_ARG(out.defined() && out.shape() == Shape({batch, seq, c}) && out.dtype() == qkv.dtype(), function,
                  "out", "must be (B, T, C) of qkv's dtype");
}

}  // namespace

void attention_core_forward(const Tensor& qkv, std::int64_t heads, const Tensor& att, const Tensor& out) {
  require_core_shapes(qkv, heads, att, out, "attention_core_forward");
  dispatch("attention_core_forward", {{"qkv", qkv}, {"att", att}, {"out", out}}, qkv.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             attention_forward(on, out.data<T>(), att.data<T>(), qkv.data<T>(), qkv.dim(0), qkv.dim(1),
                               qkv.dim(2) / 3, heads);
           });
}

void attention_core_backward(const Tensor& dout, const Tensor& att, const Tensor& qkv, std::int64_t heads,
                             const Tensor& dqkv) {
  require_core_shapes(qkv, heads, att, dout, "attention_core_backward");
  DTL_REQUIRE_ARG(dqkv.defined() && dqkv.shape() == qkv.shape() && dqkv.dtype() == qkv.dtype(),
                  "attention_core_backward", "dqkv", "must have qkv's shape and dtype");
  dispatch("attention_core_backward", {{"dout", dout}, {"att", att}, {"qkv", qkv}, {"dqkv", dqkv}}, qkv.dtype(),
           [&](auto on, auto zero) {
             using T = decltype(zero);
             dqkv.zero();  // the CPU kernel accumulates (the CUDA one overwrites; zeroing is cheap either way)
             attention_backward(on, dqkv.data<T>(), dout.data<T>(), att.data<T>(), qkv.data<T>(), qkv.dim(0),
                                qkv.dim(1), qkv.dim(2) / 3, heads);
           });
}

// ---------------------------------------------------------------------------
// CausalSelfAttention
// ---------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t channels, std::int64_t heads,
                                         DType dtype, Rng& rng, double init_std, double proj_std)
    : Layer(name),
      channels_(channels),
      heads_(heads),
      qkv_(name + ".qkv", channels, 3 * channels, dtype, rng, init_std),
      proj_(name + ".proj", channels, channels, dtype, rng, proj_std) {
  DTL_REQUIRE_ARG(heads >= 1 && channels % heads == 0, "CausalSelfAttention", "heads",
                  "is " + std::to_string(heads) + "; it must divide channels (" + std::to_string(channels) + ")");
}

std::vector<Parameter*> CausalSelfAttention::parameters() {
  std::vector<Parameter*> all = qkv_.parameters();
  for (Parameter* p : proj_.parameters()) all.push_back(p);
  return all;
}

Shape CausalSelfAttention::output_shape(const Shape& input) const {
  DTL_REQUIRE_ARG(input.size() == 3 && input[2] == channels_, (name_ + ".output_shape").c_str(), "input",
                  "is " + to_string(input) + ", expected (B, T, " + std::to_string(channels_) + ")");
  return input;
}

void CausalSelfAttention::set_slot(int slot) {
  Layer::set_slot(slot);
  qkv_.set_slot(slot);
  proj_.set_slot(slot);
}

void CausalSelfAttention::release_slot(int slot) {
  caches_.release(slot);
  qkv_.release_slot(slot);
  proj_.release_slot(slot);
}

const Tensor& CausalSelfAttention::forward(const Tensor& x) {
  require_input(x, qkv_.weight().value.dtype(), channels_, name_, "x");
  output_shape(x.shape());  // checks (B, T, C)
  const std::int64_t batch = x.dim(0), seq = x.dim(1);
  Cache& cache = caches_.at(slot_);
  cache.qkv = qkv_.forward(x);  // (B, T, 3C)
  ensure(cache.att, {batch, heads_, seq, seq}, x.dtype(), x.device());
  ensure(cache.out, {batch, seq, channels_}, x.dtype(), x.device());
  attention_core_forward(cache.qkv, heads_, cache.att, cache.out);
  return proj_.forward(cache.out);  // (B, T, C)
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  Cache& cache = caches_.at(slot_);
  DTL_REQUIRE_ARG(cache.qkv.defined(), (name_ + ".backward").c_str(), "dy", "came before any forward in this slot");
  const Tensor& dout = proj_.backward(dy, grad_ready);  // (B, T, C)
  ensure(cache.dqkv, cache.qkv.shape(), dy.dtype(), dy.device());
  attention_core_backward(dout, cache.att, cache.qkv, heads_, cache.dqkv);
  return qkv_.backward(cache.dqkv, grad_ready);  // (B, T, C)
}

// B and W (Note [Split backward]): the attention core has no parameters, so it
// is all B; the projections split.
const Tensor& CausalSelfAttention::backward_input(const Tensor& dy) {
  Cache& cache = caches_.at(slot_);
  DTL_REQUIRE_ARG(cache.qkv.defined(), (name_ + ".backward_input").c_str(), "dy",
                  "came before any forward in this slot");
  const Tensor& dout = proj_.backward_input(dy);
  ensure(cache.dqkv, cache.qkv.shape(), dy.dtype(), dy.device());
  attention_core_backward(dout, cache.att, cache.qkv, heads_, cache.dqkv);
  return qkv_.backward_input(cache.dqkv);
}

void CausalSelfAttention::backward_weight(const GradReadyFn& grad_ready) {
  proj_.backward_weight(grad_ready);  // the fused backward's order: proj first
  qkv_.backward_weight(grad_ready);
}

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

std::unique_ptr<Layer> make_mlp_block(const std::string& name, std::int64_t channels, std::int64_t hidden,
                                      Activation activation, DType dtype, Rng& rng, double init_std,
                                      double proj_std) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<LayerNorm>(name + ".ln", channels, dtype));
  auto fc = std::make_unique<Linear>(name + ".fc", channels, hidden, dtype, rng, init_std);
  Linear& fc_ref = *fc;
  layers.push_back(std::move(fc));
  if (activation == Activation::kReLU) {
    layers.push_back(std::make_unique<ReLU>(name + ".act"));
  } else {
    // On the GPU the bias goes into the GELU's pass: Note [Fused bias + GELU] in kernels/bias_gelu.cu.
    auto act = std::make_unique<GELU>(name + ".act");
    act->fuse_bias_of(fc_ref);
    layers.push_back(std::move(act));
  }
  layers.push_back(std::make_unique<Linear>(name + ".proj", hidden, channels, dtype, rng, proj_std));
  return std::make_unique<Residual>(name, std::make_unique<Sequential>(name + ".mlp", std::move(layers)));
}

std::unique_ptr<Layer> make_attention_block(const std::string& name, std::int64_t channels, std::int64_t heads,
                                            DType dtype, Rng& rng, double init_std, double proj_std) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<LayerNorm>(name + ".ln", channels, dtype));
  layers.push_back(
      std::make_unique<CausalSelfAttention>(name + ".attn", channels, heads, dtype, rng, init_std, proj_std));
  return std::make_unique<Residual>(name, std::make_unique<Sequential>(name + ".seq", std::move(layers)));
}

}  // namespace dtl::nn
