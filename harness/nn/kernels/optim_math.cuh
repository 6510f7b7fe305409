// One element of an optimizer step, written once for the GPU and the host.
//
// An optimizer step is elementwise: element i of the parameters moves using
// element i of the gradient and of the state only. So the GPU step
// (optim.cu) is this function in a grid-stride loop, and a slice of a flat
// buffer (lab 06's shard) steps exactly as it would inside the whole buffer.
// The host test (tests/kernels_host_test.cc) runs it against the CPU optimizers.
#pragma once

#include <cmath>

#include "harness/nn/kernels/elementwise_math.cuh"  // DTL_NN_HD

namespace dtl::nn::kernels {

/// @brief SGD (PyTorch's semantics): g = grad + wd p; m = mu m + g (when there is momentum); p -= lr m.
/// @param[in,out] p the parameter.
/// @param[in,out] m the momentum, or null for plain SGD.
DTL_NN_HD inline void sgd_update(float* p, float* m, float grad, float lr, float mu, float wd) {
  const float g = grad + wd * *p;
  if (m != nullptr) {
    *m = mu * *m + g;
    *p -= lr * *m;
  } else {
    *p -= lr * g;
  }
}

/// @brief The constants of one AdamW step, the same for every element (c1, c2: the bias corrections).
struct AdamWStep {
  float lr;            ///< learning rate
  float beta1;         ///< first-moment decay
  float beta2;         ///< second-moment decay
  float eps;           ///< added to sqrt(v_hat)
  float weight_decay;  ///< decoupled weight decay
  float correction1;   ///< 1 - beta1^t
  float correction2;   ///< 1 - beta2^t
};

/// @brief AdamW: p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr (m / c1) / (sqrt(v / c2) + eps).
DTL_NN_HD inline void adamw_update(float* p, float* m, float* v, float g, const AdamWStep& s) {
  *p -= s.lr * s.weight_decay * *p;  // decoupled weight decay
  *m = s.beta1 * *m + (1.0f - s.beta1) * g;
  *v = s.beta2 * *v + (1.0f - s.beta2) * g * g;
  const float m_hat = *m / s.correction1;
  const float v_hat = *v / s.correction2;
  *p -= s.lr * m_hat / (sqrtf(v_hat) + s.eps);
}

}  // namespace dtl::nn::kernels
