// The GPU kernels' math on the host, against the CPU layers (CI has no GPU).
//
// kernels/*_math.cuh hold the per-element and per-lane functions the CUDA
// kernels are made of, as __host__ __device__ code. Here they are compiled by
// the host compiler and composed the way the kernels compose them — every lane
// of a row in turn, the lanes' partial results combined — and the result is
// compared with the CPU layers (dense.cc, normalization.cc, loss.cc,
// transformer.cc), a separate implementation. What the GPU adds on top (warp
// shuffles, shared memory, cuBLAS, launches) is checked by nn_gpu_test where a
// GPU is present.
//
// Tolerances, f32 throughout: the CPU layers and these functions do the same
// operations, except that sums over a row (C, V or T terms) are added in
// another order (per lane, then across lanes). Reordering n float additions
// changes a sum by at most about n * 2^-24 * sum|terms|; with n <= 128 and
// terms of order 1 that is ~1e-5 relative, the bound used below. Elementwise
// functions do identical float operations: 1e-6 allows for libm's tanh/exp
// being evaluated in a different expression shape.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/nn/kernels/attention_math.cuh"
#include "harness/nn/kernels/bias_gelu_math.cuh"
#include "harness/nn/kernels/elementwise_math.cuh"
#include "harness/nn/kernels/optim_math.cuh"
#include "harness/nn/kernels/row_math.cuh"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/optim.h"
#include "harness/random.h"

#ifdef DTL_HAVE_CUDA
#include <string>

#include "harness/cuda/device.h"
#include "harness/nn/cuda_ops.h"
#endif

namespace dtl::nn {
namespace {

using namespace kernels;

Tensor random_f32(const Shape& shape, std::uint64_t seed, double scale = 1.0, double mean = 0.0) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kF32, MemoryCategory::kOther);
  for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(mean, scale));
  return t;
}

::testing::AssertionResult near(double got, double want, double rel, const char* what, std::int64_t i) {
  if (std::fabs(got - want) <= rel * (1.0 + std::fabs(want))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << "[" << i << "]: kernel math " << got << ", CPU layer " << want;
}

// ---------------------------------------------------------------------------
// Elementwise: ReLU and GELU
// ---------------------------------------------------------------------------

TEST(KernelsHost, ActivationsMatchTheCpuLayers) {
  Tensor x = random_f32({40, 25}, 1, 3.0);
  x.data<float>()[0] = 0.0f;  // the kink of ReLU: the subgradient 0 on both sides
  x.data<float>()[1] = -0.0f;
  const Tensor dy = random_f32({40, 25}, 2);
  ReLU relu("relu");
  GELU gelu_layer("gelu");
  const Tensor& y_relu = relu.forward(x);
  const Tensor& dx_relu = relu.backward(dy, {});
  const Tensor& y_gelu = gelu_layer.forward(x);
  const Tensor& dx_gelu = gelu_layer.backward(dy, {});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i], g = dy.data<float>()[i];
    ASSERT_EQ(kernels::relu(v), y_relu.data<float>()[i]) << i;
    ASSERT_EQ(kernels::relu_backward(v, g), dx_relu.data<float>()[i]) << i;
    ASSERT_TRUE(near(kernels::gelu(v), y_gelu.data<float>()[i], 1e-6, "gelu", i));
    ASSERT_TRUE(near(kernels::gelu_backward(v, g), dx_gelu.data<float>()[i], 1e-6, "gelu'", i));
  }
}

// ---------------------------------------------------------------------------
// Fused bias + GELU: against the unfused CPU layers (Linear with its bias, GELU)
// ---------------------------------------------------------------------------

// The kernels get the Linear's x W^T without the bias: a bias-less Linear with the
// same weights gives it. Forward: one float addition and gelu per element, as the
// CPU (whose GEMM adds onto the bias instead: 1 ulp of h apart at most). Backward:
// the bias gradient walks the rows in the CPU's order; both start from the same
// non-zero gradient, so a kernel that overwrote db instead of adding would fail.
TEST(KernelsHost, FusedBiasGeluMatchesLinearThenGelu) {
  const std::int64_t n = 37, in = 9, out = 70;
  Rng rng(3);
  Linear fc("fc", in, out, DType::kF32, rng, 0.5);
  Linear fc_no_bias("fc_nb", in, out, DType::kF32, rng, 0.5, /*bias=*/false);
  GELU act("act");
  fc_no_bias.weight().value.copy_from(fc.weight().value);
  const Tensor b = random_f32({out}, 4, 0.7);
  fc.bias().value.copy_from(b);
  const Tensor db0 = random_f32({out}, 5);
  fc.bias().grad.copy_from(db0);
  const Tensor x = random_f32({n, in}, 6, 1.5);
  const Tensor dg = random_f32({n, out}, 7);

  const Tensor& g_cpu = act.forward(fc.forward(x));
  const Tensor& dh_cpu = act.backward(dg, {});
  fc.backward(dh_cpu, {});
  const Tensor y = fc_no_bias.forward(x).clone(MemoryCategory::kOther);  // x W^T, (n, out)

  const float* yp = y.data<float>();
  const float* bp = b.data<float>();
  for (std::int64_t i = 0; i < n * out; ++i) {
    ASSERT_TRUE(near(bias_gelu(yp[i], bp[i % out]), g_cpu.data<float>()[i], 1e-6, "gelu(y + b)", i));
  }
  std::vector<float> dh(static_cast<std::size_t>(n * out), 0.0f);
  std::vector<float> db(db0.data<float>(), db0.data<float>() + out);
  for (std::int64_t j = 0; j < out; ++j) {  // one GPU thread per column
    bias_gelu_backward_column(dh.data(), db.data(), yp, bp, dg.data<float>(), n, out, j);
  }
  for (std::int64_t i = 0; i < n * out; ++i) {
    ASSERT_TRUE(near(dh[static_cast<std::size_t>(i)], dh_cpu.data<float>()[i], 1e-6, "dh", i));
  }
  for (std::int64_t j = 0; j < out; ++j) {
    ASSERT_TRUE(near(db[static_cast<std::size_t>(j)], fc.bias().grad.data<float>()[j], 1e-5, "db", j));
  }
}

// The link itself: refused without a bias, and on the CPU a linked pair computes
// exactly what an unlinked one does (the fusion is the GPU's only).
TEST(KernelsHost, FuseBiasOfNeedsABiasAndLeavesTheCpuUnfused) {
  Rng rng(1);
  Linear no_bias("nb", 3, 4, DType::kF32, rng, 0.0, /*bias=*/false);
  GELU act("act");
  EXPECT_THROW(act.fuse_bias_of(no_bias), InvalidArgument);
  Rng a(2), b(2);
  Linear fc_plain("fc", 5, 6, DType::kF32, a, 0.5), fc_linked("fc", 5, 6, DType::kF32, b, 0.5);
  GELU gelu_plain("act"), gelu_linked("act");
  gelu_linked.fuse_bias_of(fc_linked);
  const Tensor bias = random_f32({6}, 3);
  fc_plain.bias().value.copy_from(bias);
  fc_linked.bias().value.copy_from(bias);
  const Tensor x = random_f32({7, 5}, 4), dg = random_f32({7, 6}, 5);
  const Tensor& g_plain = gelu_plain.forward(fc_plain.forward(x));
  const Tensor& g_linked = gelu_linked.forward(fc_linked.forward(x));
  const Tensor& dx_plain = fc_plain.backward(gelu_plain.backward(dg, {}), {});
  const Tensor& dx_linked = fc_linked.backward(gelu_linked.backward(dg, {}), {});
  for (std::int64_t i = 0; i < g_plain.numel(); ++i) ASSERT_EQ(g_plain.data<float>()[i], g_linked.data<float>()[i]);
  for (std::int64_t i = 0; i < dx_plain.numel(); ++i) ASSERT_EQ(dx_plain.data<float>()[i], dx_linked.data<float>()[i]);
  for (std::int64_t j = 0; j < 6; ++j) {
    ASSERT_EQ(fc_plain.bias().grad.data<float>()[j], fc_linked.bias().grad.data<float>()[j]);
  }
}

// The derivative in the backward against central differences of the forward,
// in y and in b (the two enter as y + b, so both derivatives are gelu'(y + b)).
TEST(KernelsHost, FusedBiasGeluBackwardIsTheDerivativeOfItsForward) {
  const float h = 1e-2f;
  for (float y = -4.0f; y <= 4.0f; y += 0.37f) {
    for (float b : {-1.3f, 0.0f, 0.6f}) {
      const float dh_dy = (bias_gelu(y + h, b) - bias_gelu(y - h, b)) / (2 * h);
      const float dh_db = (bias_gelu(y, b + h) - bias_gelu(y, b - h)) / (2 * h);
      float dh = 0.0f, db = 0.0f;
      const float dg = 1.0f;
      bias_gelu_backward_column(&dh, &db, &y, &b, &dg, 1, 1, 0);
      EXPECT_NEAR(dh, dh_dy, 2e-3) << "y " << y << " b " << b;
      EXPECT_NEAR(db, dh_db, 2e-3) << "y " << y << " b " << b;
    }
  }
}

// ---------------------------------------------------------------------------
// LayerNorm: the warp-per-row kernel, played lane by lane
// ---------------------------------------------------------------------------

// What layernorm.cu computes, with `lanes` threads per row.
struct LayerNormHost {
  std::vector<float> y, mean, rstd, dx, dw, db;
};

LayerNormHost layernorm_as_the_kernel(const float* x, const float* w, const float* b, const float* dy, std::int64_t n,
                                      std::int64_t c, int lanes) {
  LayerNormHost r;
  r.y.resize(static_cast<std::size_t>(n * c));
  r.dx.resize(r.y.size());
  r.mean.resize(static_cast<std::size_t>(n));
  r.rstd.resize(static_cast<std::size_t>(n));
  r.dw.assign(static_cast<std::size_t>(c), 0.0f);
  r.db.assign(static_cast<std::size_t>(c), 0.0f);
  for (std::int64_t row = 0; row < n; ++row) {
    const float* xr = x + row * c;
    float sum = 0.0f;
    for (int lane = 0; lane < lanes; ++lane) sum += lane_sum(xr, c, lane, lanes);
    const float m = sum / static_cast<float>(c);
    float ssd = 0.0f;
    for (int lane = 0; lane < lanes; ++lane) ssd += lane_sum_sq_dev(xr, c, m, lane, lanes);
    const float rs = layernorm_rstd(ssd, c);
    for (std::int64_t j = 0; j < c; ++j) r.y[static_cast<std::size_t>(row * c + j)] = layernorm_element(xr[j], m, rs, w[j], b[j]);
    r.mean[static_cast<std::size_t>(row)] = m;
    r.rstd[static_cast<std::size_t>(row)] = rs;
    // backward, dx
    LayerNormSums s;
    for (int lane = 0; lane < lanes; ++lane) {
      const LayerNormSums p = layernorm_lane_sums(dy + row * c, xr, w, m, rs, c, lane, lanes);
      s.dnorm += p.dnorm;
      s.dnorm_norm += p.dnorm_norm;
    }
    for (std::int64_t j = 0; j < c; ++j)
      r.dx[static_cast<std::size_t>(row * c + j)] =
          layernorm_dx(dy[row * c + j], xr[j], w[j], m, rs, s.dnorm / static_cast<float>(c),
                       s.dnorm_norm / static_cast<float>(c));
  }
  return r;
}

TEST(KernelsHost, LayerNormMatchesTheCpuLayer) {
  // C below, at and above the warp; lanes that do not divide C; an offset mean.
  for (const std::int64_t c : {5, 32, 100}) {
    for (const int lanes : {32, 7}) {
      const std::int64_t n = 9;
      const Tensor x = random_f32({n, c}, 3, 2.0, 1.5);
      const Tensor dy = random_f32({n, c}, 4);
      LayerNorm cpu("ln", c, DType::kF32);
      const Parameter& weight = *cpu.parameters()[0];
      const Parameter& bias = *cpu.parameters()[1];
      Rng rng(5);
      for (float& v : weight.value.span<float>()) v = static_cast<float>(rng.normal(1.0, 0.3));
      for (float& v : bias.value.span<float>()) v = static_cast<float>(rng.normal(0.0, 0.3));
      const Tensor& y = cpu.forward(x);
      const Tensor& dx = cpu.backward(dy, {});
      const LayerNormHost k = layernorm_as_the_kernel(x.data<float>(), weight.value.data<float>(),
                                                      bias.value.data<float>(), dy.data<float>(), n, c, lanes);
      for (std::int64_t i = 0; i < n * c; ++i) {
        ASSERT_TRUE(near(k.y[static_cast<std::size_t>(i)], y.data<float>()[i], 1e-5, "y", i)) << "C " << c << " lanes " << lanes;
        ASSERT_TRUE(near(k.dx[static_cast<std::size_t>(i)], dx.data<float>()[i], 1e-5, "dx", i)) << "C " << c << " lanes " << lanes;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Softmax + cross-entropy: the block-per-row kernel, played lane by lane
// ---------------------------------------------------------------------------

TEST(KernelsHost, SoftmaxCrossEntropyMatchesTheCpuLoss) {
  const std::int64_t n = 12, v = 70;
  Tensor z = random_f32({n, v}, 6, 4.0);
  Tensor targets = Tensor::zeros({n}, DType::kI32, MemoryCategory::kOther);
  Rng rng(7);
  for (std::int32_t& t : targets.span<std::int32_t>()) t = static_cast<std::int32_t>(rng.below(v));
  // Row 0: a tie for the maximum at 3 and 40 (the first one wins); row 1: the target is the argmax.
  z.data<float>()[3] = z.data<float>()[40] = 50.0f;
  targets.data<std::int32_t>()[0] = 40;
  z.data<float>()[v + 9] = 60.0f;
  targets.data<std::int32_t>()[1] = 9;
  SoftmaxCrossEntropy cpu;
  const double cpu_loss = cpu.forward(z, targets);
  const Tensor& cpu_grad = cpu.backward(0.5);
  for (const int lanes : {256, 32, 3}) {
    double loss = 0;
    std::int64_t correct = 0;
    const float s = static_cast<float>(0.5 / static_cast<double>(n));
    for (std::int64_t row = 0; row < n; ++row) {
      const float* zr = z.data<float>() + row * v;
      MaxArg m = lane_max_arg(zr, v, 0, lanes);
      for (int lane = 1; lane < lanes; ++lane) m = max_arg_combine(m, lane_max_arg(zr, v, lane, lanes));
      double sum = 0;
      for (int lane = 0; lane < lanes; ++lane) sum += lane_sum_exp(zr, v, m.value, lane, lanes);
      const std::int32_t y = targets.data<std::int32_t>()[row];
      loss += xent_row_loss(sum, zr[y], m.value);
      correct += m.index == y ? 1 : 0;
      for (std::int64_t j = 0; j < v; ++j) {
        const float p = softmax_prob(zr[j], m.value, sum);
        ASSERT_TRUE(near(p, cpu.probs().data<float>()[row * v + j], 1e-6, "probs", row * v + j)) << lanes;
        ASSERT_TRUE(near(xent_grad(p, j == y, s), cpu_grad.data<float>()[row * v + j], 1e-6, "dlogits", row * v + j));
      }
    }
    EXPECT_NEAR(loss / static_cast<double>(n), cpu_loss, 1e-9 * (1 + cpu_loss)) << lanes;
    EXPECT_EQ(correct, cpu.correct()) << lanes;
  }
  EXPECT_GE(cpu.correct(), 1);  // row 1 at least, so the count is tested
}

// ---------------------------------------------------------------------------
// Attention: gather into heads, scores, causal softmax, back, scatter
// ---------------------------------------------------------------------------

// C (m, n) = alpha A (m, k) B^T (n, k) or A B (k, n): what the batched GEMMs do, as loops.
void matmul(float* c, const float* a, const float* b, std::int64_t m, std::int64_t n, std::int64_t k, bool a_t,
            bool b_t, float alpha) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += (a_t ? a[p * m + i] : a[i * k + p]) * (b_t ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = alpha * s;
    }
}

TEST(KernelsHost, AttentionAsTheKernelsComposeItMatchesTheCpuCore) {
  const std::int64_t batch = 2, seq = 37, c = 12, heads = 3, hs = c / heads;  // T above a warp: lanes wrap
  const int lanes = 32;
  const Tensor qkv = random_f32({batch, seq, 3 * c}, 8);
  const Tensor dout = random_f32({batch, seq, c}, 9);
  const Tensor att_cpu = Tensor::zeros({batch, heads, seq, seq}, DType::kF32, MemoryCategory::kOther);
  const Tensor out_cpu = Tensor::zeros({batch, seq, c}, DType::kF32, MemoryCategory::kOther);
  const Tensor dqkv_cpu = Tensor::zeros({batch, seq, 3 * c}, DType::kF32, MemoryCategory::kOther);
  attention_core_forward(qkv, heads, att_cpu, out_cpu);
  attention_core_backward(dout, att_cpu, qkv, heads, dqkv_cpu);

  const HeadDims d{batch, seq, heads, hs};
  const std::int64_t n = d.count(), bh = batch * heads, t = seq;
  std::vector<float> q(n), k(n), v(n), o(n), doh(n), dq(n), dk(n), dv(n), att(bh * t * t), ds(bh * t * t);
  std::vector<float> out(batch * seq * c), dqkv(batch * seq * 3 * c);
  for (std::int64_t i = 0; i < n; ++i) {
    q[i] = qkv.data<float>()[head_source(i, 3 * c, 0, d)];
    k[i] = qkv.data<float>()[head_source(i, 3 * c, c, d)];
    v[i] = qkv.data<float>()[head_source(i, 3 * c, 2 * c, d)];
    doh[i] = dout.data<float>()[head_source(i, c, 0, d)];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (std::int64_t p = 0; p < bh; ++p) {
    float* a = att.data() + p * t * t;
    float* g = ds.data() + p * t * t;
    const std::int64_t h0 = p * t * hs;
    matmul(a, &q[h0], &k[h0], t, t, hs, false, true, scale);
    for (std::int64_t r = 0; r < t; ++r) {  // causal_softmax_kernel, one row
      float* ar = a + r * t;
      const std::int64_t len = r + 1;
      float mx = -INFINITY, sum = 0;
      for (int lane = 0; lane < lanes; ++lane) mx = std::max(mx, lane_max(ar, len, lane, lanes));
      for (int lane = 0; lane < lanes; ++lane) sum += lane_sum_expf(ar, len, mx, lane, lanes);
      for (std::int64_t j = 0; j < t; ++j) ar[j] = j < len ? std::exp(ar[j] - mx) / sum : 0.0f;
    }
    matmul(&o[h0], a, &v[h0], t, hs, t, false, false, 1.0f);
    matmul(g, &doh[h0], &v[h0], t, t, hs, false, true, 1.0f);
    matmul(&dv[h0], a, &doh[h0], t, hs, t, true, false, 1.0f);
    for (std::int64_t r = 0; r < t; ++r) {  // causal_softmax_backward_kernel, one row
      const std::int64_t len = r + 1;
      float weighted = 0;
      for (int lane = 0; lane < lanes; ++lane) weighted += lane_dot(a + r * t, g + r * t, len, lane, lanes);
      for (std::int64_t j = 0; j < t; ++j)
        g[r * t + j] = j < len ? softmax_backward_element(a[r * t + j], g[r * t + j], weighted, scale) : 0.0f;
    }
    matmul(&dq[h0], g, &k[h0], t, hs, t, false, false, 1.0f);
    matmul(&dk[h0], g, &q[h0], t, hs, t, true, false, 1.0f);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    out[head_source(i, c, 0, d)] = o[i];
    dqkv[head_source(i, 3 * c, 0, d)] = dq[i];
    dqkv[head_source(i, 3 * c, c, d)] = dk[i];
    dqkv[head_source(i, 3 * c, 2 * c, d)] = dv[i];
  }
  for (std::int64_t i = 0; i < bh * t * t; ++i) ASSERT_TRUE(near(att[i], att_cpu.data<float>()[i], 1e-5, "att", i));
  for (std::int64_t i = 0; i < batch * seq * c; ++i) ASSERT_TRUE(near(out[i], out_cpu.data<float>()[i], 1e-5, "out", i));
  for (std::int64_t i = 0; i < batch * seq * 3 * c; ++i)
    ASSERT_TRUE(near(dqkv[i], dqkv_cpu.data<float>()[i], 1e-5, "dqkv", i));
}

// ---------------------------------------------------------------------------
// Optimizers: one element at a time, against the CPU optimizers
// ---------------------------------------------------------------------------

TEST(KernelsHost, OptimizerUpdatesMatchTheCpuOptimizers) {
  const std::vector<float> p0{1.0f, -2.0f, 0.5f, 3.0f}, g{0.3f, -0.04f, 2.0f, -1e-3f};
  for (const float momentum : {0.0f, 0.9f}) {
    Sgd sgd({.lr = 0.1f, .momentum = momentum, .weight_decay = 0.01f}, 4);
    std::vector<float> cpu = p0, mine = p0, m(4, 0.0f);
    for (int t = 0; t < 3; ++t) {
      sgd.step(cpu, g);
      for (std::size_t i = 0; i < 4; ++i) sgd_update(&mine[i], momentum > 0 ? &m[i] : nullptr, g[i], 0.1f, momentum, 0.01f);
    }
    EXPECT_EQ(mine, cpu) << "momentum " << momentum;
  }
  AdamW adam({.lr = 0.01f, .weight_decay = 0.1f}, 4);
  std::vector<float> cpu = p0, mine = p0, m(4, 0.0f), v(4, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    adam.step(cpu, g);
    // The bias corrections as AdamW computes them: 1 - beta^t in double, from the float betas.
    const AdamWStep s{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, static_cast<float>(1.0 - std::pow(double{0.9f}, t)),
                      static_cast<float>(1.0 - std::pow(double{0.999f}, t))};
    for (std::size_t i = 0; i < 4; ++i) adamw_update(&mine[i], &m[i], &v[i], g[i], s);
  }
  EXPECT_EQ(mine, cpu);
  EXPECT_NE(mine, p0);
}

#ifdef DTL_HAVE_CUDA
// Note [cuBLAS loaded on first use] (cuda_ops.cu): without a GPU, the first GEMM
// still opens cuBLAS and finds its functions, then cublasCreate fails. The
// error must be cuBLAS's own (proof that dlopen and dlsym worked), not dlopen's.
TEST(KernelsHost, CublasIsOpenedOnFirstUse) {
  std::string why;
  if (dtl::cuda::gpu_count(&why) > 0) GTEST_SKIP() << "a GPU is present: nn_gpu_test runs the GEMMs";
  try {
    cuda::gemm(false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f, nullptr, 1);
    FAIL() << "cuBLAS ran without a GPU";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cublasCreate"), std::string::npos) << what;
    EXPECT_EQ(what.find("dlopen"), std::string::npos) << what;
    EXPECT_EQ(what.find("dlsym"), std::string::npos) << what;
  }
}
#endif

}  // namespace
}  // namespace dtl::nn
