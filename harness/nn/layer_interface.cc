// The containers: Sequential (a chain) and Residual (y = x + f(x)).
#include "harness/nn/layer_interface.h"

#include "harness/nn/layer_util.h"

namespace dtl::nn {

using namespace detail;  // dispatch, require_grad, ensure, notify

namespace {

// y = a + b over `count` elements: the residual sum, forward (x + f(x)) and
// backward (dy + f's dx). The CUDA kernel of the same name takes OnCuda.
template <typename T>
void add(OnCpu, T* y, const T* a, const T* b, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

}  // namespace

// The default W of a layer that does not split (Note [Split backward]): its B
// ran the fused backward, so the gradients are in; announce them as the fused
// backward would have, last parameter first.
void Layer::backward_weight(const GradReadyFn& grad_ready) {
  const std::vector<Parameter*> params = parameters();
  for (auto it = params.rbegin(); it != params.rend(); ++it) notify(grad_ready, **it);
}

// ---------------------------------------------------------------------------
// Sequential and Residual
// ---------------------------------------------------------------------------

Sequential::Sequential(std::string name, std::vector<std::unique_ptr<Layer>> layers)
    : Layer(std::move(name)), layers_(std::move(layers)) {
  DTL_REQUIRE_ARG(!layers_.empty(), "Sequential", "layers", "is empty");
  for (const auto& layer : layers_) DTL_REQUIRE_ARG(layer != nullptr, "Sequential", "layers", "holds a null layer");
}

const Tensor& Sequential::forward(const Tensor& x) {
  const Tensor* h = &x;
  for (const auto& layer : layers_) h = &layer->forward(*h);
  return *h;
}

const Tensor& Sequential::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  const Tensor* g = &dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = &(*it)->backward(*g, grad_ready);
  return *g;
}

const Tensor& Sequential::backward_input(const Tensor& dy) {
  const Tensor* g = &dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = &(*it)->backward_input(*g);
  return *g;
}

void Sequential::backward_weight(const GradReadyFn& grad_ready) {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) (*it)->backward_weight(grad_ready);
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (const auto& layer : layers_)
    for (Parameter* p : layer->parameters()) all.push_back(p);
  return all;
}

Shape Sequential::output_shape(const Shape& input) const {
  Shape s = input;
  for (const auto& layer : layers_) s = layer->output_shape(s);
  return s;
}

void Sequential::set_slot(int slot) {
  Layer::set_slot(slot);
  for (const auto& layer : layers_) layer->set_slot(slot);
}

void Sequential::release_slot(int slot) {
  for (const auto& layer : layers_) layer->release_slot(slot);
}

Residual::Residual(std::string name, std::unique_ptr<Layer> inner)
    : Layer(std::move(name)), inner_(std::move(inner)) {
  DTL_REQUIRE_ARG(inner_ != nullptr, "Residual", "inner", "is null");
}

Shape Residual::output_shape(const Shape& input) const {
  const Shape inner = inner_->output_shape(input);
  DTL_REQUIRE_ARG(inner == input, (name_ + ".output_shape").c_str(), "input",
                  "maps to " + to_string(inner) + " inside; a residual needs the same shape as " + to_string(input));
  return input;
}

const Tensor& Residual::forward(const Tensor& x) {
  const Tensor& fx = inner_->forward(x);
  Cache& cache = caches_.at(slot_);
  ensure(cache.y, x.shape(), x.dtype(), x.device());
  dispatch("Residual::forward", {{"x", x}, {"f(x)", fx}}, x.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    add(on, cache.y.data<T>(), x.data<T>(), fx.data<T>(), x.numel());
  });
  return cache.y;
}

const Tensor& Residual::backward(const Tensor& dy, const GradReadyFn& grad_ready) {
  require_grad(dy, caches_.at(slot_).y, name_);
  return skip_sum(dy, inner_->backward(dy, grad_ready));
}

const Tensor& Residual::backward_input(const Tensor& dy) {
  require_grad(dy, caches_.at(slot_).y, name_);
  return skip_sum(dy, inner_->backward_input(dy));
}

// dx = dy + f's dx: both paths reach x.
const Tensor& Residual::skip_sum(const Tensor& dy, const Tensor& dinner) {
  Cache& cache = caches_.at(slot_);
  ensure(cache.dx, dy.shape(), dy.dtype(), dy.device());
  dispatch("Residual::backward", {{"dy", dy}, {"f's dx", dinner}}, dy.dtype(), [&](auto on, auto zero) {
    using T = decltype(zero);
    add(on, cache.dx.data<T>(), dy.data<T>(), dinner.data<T>(), dy.numel());
  });
  return cache.dx;
}

void Residual::set_slot(int slot) {
  Layer::set_slot(slot);
  inner_->set_slot(slot);
}

void Residual::release_slot(int slot) {
  caches_.release(slot);
  inner_->release_slot(slot);
}

}  // namespace dtl::nn
