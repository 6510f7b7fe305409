// Model: units, hooks, flat buffers, stages, and the two model builders.
#include "harness/nn/model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "harness/error.h"

namespace dtl::nn {

std::vector<Parameter*> Unit::parameters() const {
  std::vector<Parameter*> all;
  for (const auto& layer : layers)
    for (Parameter* p : layer->parameters()) all.push_back(p);
  return all;
}

void Model::add_unit(std::string name, std::vector<std::unique_ptr<Layer>> layers) {
  DTL_REQUIRE_ARG(!layers.empty(), "Model::add_unit", "layers", "is empty (unit '" + name + "')");
  for (const auto& layer : layers) DTL_REQUIRE_ARG(layer != nullptr, "Model::add_unit", "layers", "holds a null layer");
  DTL_REQUIRE_ARG(!flat_values_.defined() && !flat_grads_.defined(), "Model::add_unit", "this",
                  "was already flattened; add every unit first");
  units_.push_back(Unit{std::move(name), std::move(layers)});
}

Unit& Model::unit(int i) {
  DTL_REQUIRE_ARG(i >= 0 && i < unit_count(), "Model::unit", "i",
                  "is " + std::to_string(i) + "; the model has " + std::to_string(unit_count()) + " units");
  return units_[static_cast<std::size_t>(i)];
}

const Tensor& Model::forward(const Tensor& x) {
  DTL_REQUIRE_ARG(!units_.empty(), "Model::forward", "this", "has no units");
  const Tensor* h = &x;
  for (int u = 0; u < unit_count(); ++u) {
    if (hooks_.pre_forward) hooks_.pre_forward(u);
    for (const auto& layer : units_[static_cast<std::size_t>(u)].layers) h = &layer->forward(*h);
    if (hooks_.post_forward) hooks_.post_forward(u);
  }
  return *h;
}

const Tensor& Model::backward(const Tensor& dy) {
  DTL_REQUIRE_ARG(!units_.empty(), "Model::backward", "this", "has no units");
  const Tensor* g = &dy;
  for (int u = unit_count() - 1; u >= 0; --u) {
    if (hooks_.pre_backward) hooks_.pre_backward(u);
    auto& layers = units_[static_cast<std::size_t>(u)].layers;
    // Each layer announces its parameters (last first) as it finishes them,
    // so grad_ready runs in reverse parameter order over the whole model.
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = &(*it)->backward(*g, hooks_.grad_ready);
    if (hooks_.post_backward) hooks_.post_backward(u);
  }
  return *g;
}

// B and W (Note [Split backward]): units last first, as backward() runs them.
const Tensor& Model::backward_input(const Tensor& dy) {
  DTL_REQUIRE_ARG(!units_.empty(), "Model::backward_input", "this", "has no units");
  DTL_REQUIRE_ARG(!hooks_.pre_backward && !hooks_.post_backward, "Model::backward_input", "hooks",
                  "has pre_backward or post_backward set; a split backward runs no unit's backward at one time");
  const Tensor* g = &dy;
  for (int u = unit_count() - 1; u >= 0; --u) {
    auto& layers = units_[static_cast<std::size_t>(u)].layers;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = &(*it)->backward_input(*g);
  }
  return *g;
}

void Model::backward_weight() {
  DTL_REQUIRE_ARG(!units_.empty(), "Model::backward_weight", "this", "has no units");
  DTL_REQUIRE_ARG(!hooks_.pre_backward && !hooks_.post_backward, "Model::backward_weight", "hooks",
                  "has pre_backward or post_backward set; a split backward runs no unit's backward at one time");
  for (int u = unit_count() - 1; u >= 0; --u) {
    auto& layers = units_[static_cast<std::size_t>(u)].layers;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) (*it)->backward_weight(hooks_.grad_ready);
  }
}

std::vector<Parameter*> Model::parameters() const {
  std::vector<Parameter*> all;
  for (const Unit& u : units_)
    for (Parameter* p : u.parameters()) all.push_back(p);
  return all;
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->value.numel();
  return n;
}

void Model::to(Device device) {
  DTL_REQUIRE_ARG(!flat_values_.defined() && !flat_grads_.defined(), "Model::to", "this",
                  "was flattened; move the model first, then flatten it on its device");
  for (Parameter* p : parameters()) {
    if (p->value.device() != device) p->value = p->value.to(device);
    if (p->grad.device() != device) p->grad = p->grad.to(device);
  }
}

void Model::zero_grad() const {
  for (const Parameter* p : parameters()) p->zero_grad();
}

const Tensor& Model::flatten_values(std::int64_t pad_multiple) {
  const std::vector<Parameter*> params = parameters();
  flat_values_ = nn::flatten_values(params, pad_multiple);  // the free function; the member hides it
  return flat_values_;
}

const Tensor& Model::flatten_grads(std::int64_t pad_multiple) {
  const std::vector<Parameter*> params = parameters();
  flat_grads_ = nn::flatten_grads(params, pad_multiple);
  return flat_grads_;
}

std::vector<Shape> Model::activation_shapes(const Shape& input) const {
  std::vector<Shape> shapes{input};
  for (const Unit& u : units_) {
    Shape s = shapes.back();
    for (const auto& layer : u.layers) s = layer->output_shape(s);
    shapes.push_back(std::move(s));
  }
  return shapes;
}

std::vector<Stage> Model::split_stages(int stages, const Shape& input, std::span<const double> costs) const {
  const int n = unit_count();
  DTL_REQUIRE_ARG(stages >= 1 && stages <= n, "Model::split_stages", "stages",
                  "is " + std::to_string(stages) + "; it must be in [1, " + std::to_string(n) + "] (the unit count)");
  DTL_REQUIRE_ARG(costs.empty() || static_cast<int>(costs.size()) == n, "Model::split_stages", "costs",
                  "has " + std::to_string(costs.size()) + " entries for " + std::to_string(n) + " units");
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  std::vector<double> cost(static_cast<std::size_t>(n));
  for (int u = 0; u < n; ++u) {
    for (const Parameter* p : units_[static_cast<std::size_t>(u)].parameters())
      counts[static_cast<std::size_t>(u)] += p->value.numel();
    cost[static_cast<std::size_t>(u)] =
        costs.empty() ? static_cast<double>(counts[static_cast<std::size_t>(u)]) : costs[static_cast<std::size_t>(u)];
  }
  // prefix[i] = cost of units [0, i)
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int u = 0; u < n; ++u) prefix[static_cast<std::size_t>(u) + 1] = prefix[static_cast<std::size_t>(u)] + cost[static_cast<std::size_t>(u)];
  // Dynamic programme: best[s][i] = the smallest possible largest-stage cost
  // when units [0, i) form s stages; cut[s][i] = where the last of them starts.
  // O(stages * n^2), nothing for a model of tens of units.
  const double inf = std::numeric_limits<double>::infinity();
  const auto width = static_cast<std::size_t>(n) + 1;
  std::vector<double> best((static_cast<std::size_t>(stages) + 1) * width, inf);
  std::vector<int> cut((static_cast<std::size_t>(stages) + 1) * width, 0);
  auto at = [&](int s, int i) { return static_cast<std::size_t>(s) * width + static_cast<std::size_t>(i); };
  best[at(0, 0)] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {  // the last stage is units [j, i)
        const double candidate = std::max(best[at(s - 1, j)], prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(j)]);
        if (candidate < best[at(s, i)]) {  // strict: among equals, the earliest cut wins
          best[at(s, i)] = candidate;
          cut[at(s, i)] = j;
        }
      }
    }
  }
  std::vector<int> bounds(static_cast<std::size_t>(stages) + 1);
  bounds[static_cast<std::size_t>(stages)] = n;
  for (int s = stages; s >= 1; --s) bounds[static_cast<std::size_t>(s) - 1] = cut[at(s, bounds[static_cast<std::size_t>(s)])];

  const std::vector<Shape> shapes = activation_shapes(input);
  std::vector<Stage> result;
  for (int s = 0; s < stages; ++s) {
    Stage st;
    st.begin = bounds[static_cast<std::size_t>(s)];
    st.end = bounds[static_cast<std::size_t>(s) + 1];
    st.input_shape = shapes[static_cast<std::size_t>(st.begin)];
    st.output_shape = shapes[static_cast<std::size_t>(st.end)];
    for (int u = st.begin; u < st.end; ++u) st.parameter_count += counts[static_cast<std::size_t>(u)];
    result.push_back(std::move(st));
  }
  return result;
}

Model Model::slice(int begin, int end) && {
  DTL_REQUIRE_ARG(0 <= begin && begin < end && end <= unit_count(), "Model::slice", "begin",
                  "[" + std::to_string(begin) + ", " + std::to_string(end) + ") is not a non-empty range of the " +
                      std::to_string(unit_count()) + " units");
  DTL_REQUIRE_ARG(!flat_values_.defined() && !flat_grads_.defined(), "Model::slice", "this",
                  "was flattened; slice first, then flatten the stage");
  Model stage(dtype_);
  for (int u = begin; u < end; ++u) stage.units_.push_back(std::move(units_[static_cast<std::size_t>(u)]));
  units_.clear();  // the rest is freed here
  return stage;
}

void Model::set_slot(int slot) {
  DTL_REQUIRE_ARG(slot >= 0, "Model::set_slot", "slot", "is negative");
  for (const Unit& u : units_)
    for (const auto& layer : u.layers) layer->set_slot(slot);
}

void Model::release_slot(int slot) {
  for (const Unit& u : units_)
    for (const auto& layer : u.layers) layer->release_slot(slot);
}

// ---------------------------------------------------------------------------
// Flat buffers
// ---------------------------------------------------------------------------

namespace {

// Moves the tensors selected by `member` (value or grad) into one flat buffer.
Tensor flatten(std::span<Parameter* const> params, std::int64_t pad_multiple, MemoryCategory category,
               Tensor Parameter::*member, const char* function) {
  DTL_REQUIRE_ARG(pad_multiple >= 1, function, "pad_multiple", "must be at least 1, not " + std::to_string(pad_multiple));
  DTL_REQUIRE_ARG(!params.empty(), function, "params", "is empty");
  const DType dtype = (params[0]->*member).dtype();
  const Device device = (params[0]->*member).device();  // the flat buffer lives where the parameters do
  std::int64_t count = 0;
  for (const Parameter* p : params) {
    const Tensor& t = p->*member;
    DTL_REQUIRE_ARG(t.defined() && t.dtype() == dtype && t.device() == device, function, "params",
                    "mixes dtypes or devices (" + p->name + ")");
    count += t.numel();
  }
  const std::int64_t padded = (count + pad_multiple - 1) / pad_multiple * pad_multiple;
  Tensor flat = Tensor::zeros({padded}, dtype, category, device);
  std::int64_t offset = 0;
  for (Parameter* p : params) {
    Tensor& t = p->*member;
    Tensor view = flat.view(offset, t.shape());
    view.copy_from(t);
    offset += t.numel();
    t = view;  // the old storage is freed here, unless something else holds it
  }
  return flat;
}

}  // namespace

Tensor flatten_values(std::span<Parameter* const> params, std::int64_t pad_multiple, MemoryCategory category) {
  return flatten(params, pad_multiple, category, &Parameter::value, "flatten_values");
}

Tensor flatten_grads(std::span<Parameter* const> params, std::int64_t pad_multiple, MemoryCategory category) {
  return flatten(params, pad_multiple, category, &Parameter::grad, "flatten_grads");
}

// ---------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------

Model make_mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, int depth, std::uint64_t seed,
               DType dtype) {
  DTL_REQUIRE_ARG(depth >= 1, "make_mlp", "depth", "must be at least 1, not " + std::to_string(depth));
  DTL_REQUIRE_ARG(classes >= 1, "make_mlp", "classes", "must be at least 1, not " + std::to_string(classes));
  Rng rng(seed);
  Model model(dtype);
  for (int i = 0; i < depth; ++i) {
    const std::string name = "fc" + std::to_string(i);
    std::vector<std::unique_ptr<Layer>> layers;
    layers.push_back(std::make_unique<Linear>(name, i == 0 ? in : hidden, hidden, dtype, rng));
    layers.push_back(std::make_unique<ReLU>(name + ".relu"));
    model.add_unit(name, std::move(layers));
  }
  std::vector<std::unique_ptr<Layer>> head;
  head.push_back(std::make_unique<Linear>("head", hidden, classes, dtype, rng));
  model.add_unit("head", std::move(head));
  return model;
}

Model make_gpt(std::int64_t vocab, std::int64_t context, std::int64_t channels, std::int64_t heads, int layers,
               std::uint64_t seed, DType dtype) {
  DTL_REQUIRE_ARG(layers >= 1, "make_gpt", "layers", "must be at least 1, not " + std::to_string(layers));
  DTL_REQUIRE_ARG(heads >= 1 && channels % heads == 0, "make_gpt", "heads",
                  "is " + std::to_string(heads) + "; it must divide channels (" + std::to_string(channels) + ")");
  constexpr double kStd = 0.02;
  // GPT-2: the projections that write into the residual stream are scaled down
  // so that the stream's variance does not grow with depth.
  const double proj_std = kStd / std::sqrt(2.0 * layers);
  Rng rng(seed);
  Model model(dtype);
  {
    std::vector<std::unique_ptr<Layer>> embed;
    embed.push_back(std::make_unique<Embedding>("wte", vocab, channels, dtype, rng, kStd));
    embed.push_back(std::make_unique<PositionalEmbedding>("wpe", context, channels, dtype, rng, kStd));
    model.add_unit("embed", std::move(embed));
  }
  for (int l = 0; l < layers; ++l) {
    const std::string name = "block" + std::to_string(l);
    std::vector<std::unique_ptr<Layer>> block;
    block.push_back(make_attention_block(name + ".attn", channels, heads, dtype, rng, kStd, proj_std));
    block.push_back(
        make_mlp_block(name + ".mlp", channels, 4 * channels, Activation::kGELU, dtype, rng, kStd, proj_std));
    model.add_unit(name, std::move(block));
  }
  std::vector<std::unique_ptr<Layer>> head;
  head.push_back(std::make_unique<LayerNorm>("lnf", channels, dtype));
  head.push_back(std::make_unique<Linear>("lm_head", channels, vocab, dtype, rng, kStd, /*bias=*/false));
  model.add_unit("head", std::move(head));
  return model;
}

}  // namespace dtl::nn
