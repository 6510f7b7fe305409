// Lab 06, task B: the sharded trainer — FlatParameters, shards, the gradient
// reduce-scatter and the sharded optimizer step (ZeRO-1, ZeRO-2, and the gradient
// half of FSDP).
//
// What this file teaches: where each byte of a ZeRO/FSDP step lives, and when.
// Per unit, with S = shard and N = padded (Note [FlatParameter]), f32 bytes:
//
//     buffer        ZeRO-1                ZeRO-2                 FSDP
//     full_values   4N, always            4N, always             4N, only around the unit's uses (task C)
//     full_grads    4N, always            4N, in its backward    4N, in its backward
//     shard         view of full_values   view of full_values    4S, own storage
//     grad_shard    view of full_grads    4S, own storage        4S, own storage
//     optimizer     8S (AdamW m, v)       8S                     8S
//
// and what one step must leave true (the Model's hooks call the trainer around
// each unit u's backward; Note [Gather and free]):
//
//     when                  what holds
//     u's backward starts   u's full_grads exists (ZeRO-2/FSDP: allocated again) and is zero
//     u's backward ended    the average over ranks of u's gradient (16-bit param_dtype: of the
//                           gradient a 16-bit backward gives) is on its way into this rank's
//                           grad_shard; at most `prefetch` such reduce-scatters are in flight
//     step() returns        every reduce-scatter complete, every full_grads that is not kept
//                           released; each shard stepped once by its optimizer with its
//                           averaged gradient, or (fp16, an inf/NaN on any rank) by none on
//                           every rank, the scale halved; ZeRO-1/2: every rank's full_values
//                           equal to the stepped shards again
//
// The order of the work that gets there is task B's to work out (the handout's hints).
//
// See Note [ZeRO stages], Note [Reduce-scatter, not allreduce] and Note [Mixed
// precision in FSDP] in lab06/fsdp.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab06/fsdp.h"
#include "trainer_setup.h"

namespace dtl::lab06 {

ShardedTrainer::ShardedTrainer(Communicator& backend, nn::Model& model, ShardedOptions options)
    : backend_(backend), model_(model), options_(std::move(options)), scale_(options_.loss_scale) {
  const char* fn = "ShardedTrainer";
  const bool fsdp = options_.mode == ShardingMode::kFsdp;
  const nn::DType pd = options_.param_dtype;
  DTL_REQUIRE_ARG(model.dtype() == nn::DType::kF32, fn, "model",
                  std::string("computes in ") + dtype_name(model.dtype()) + "; build it in f32");
  DTL_REQUIRE_ARG(!model.flat_values().defined() && !model.flat_grads().defined(), fn, "model",
                  "is already flattened; the trainer lays out one FlatParameter per unit itself");
  DTL_REQUIRE_ARG(options_.prefetch >= 0, fn, "options.prefetch",
                  "is " + std::to_string(options_.prefetch) + "; it must be >= 0");
  DTL_REQUIRE_ARG(pd == nn::DType::kF32 || ((pd == nn::DType::kBF16 || pd == nn::DType::kF16) && fsdp), fn,
                  "options.param_dtype",
                  std::string("is ") + dtype_name(pd) + "; " +
                      (fsdp ? "FSDP gathers f32, bf16 or f16" : "ZeRO-1/2 keep f32 parameters (16-bit gathers are FSDP's)"));
  DTL_REQUIRE_ARG(std::isfinite(options_.loss_scale) && options_.loss_scale > 0.0f, fn, "options.loss_scale",
                  "is " + std::to_string(options_.loss_scale) + "; it must be finite and > 0");
  // Only fp16 unscales (its gradients would underflow without the scale); an f32 or bf16
  // step would apply scaled gradients, so a scale there is refused rather than ignored.
  DTL_REQUIRE_ARG(options_.loss_scale == 1.0f || pd == nn::DType::kF16, fn, "options.loss_scale",
                  "is " + std::to_string(options_.loss_scale) + " with param_dtype " + dtype_name(pd) +
                      "; loss scaling is fp16's (param_dtype kF16): leave it at 1 for f32 and bf16");
  DTL_REQUIRE_ARG(options_.max_unit_bytes >= 0, fn, "options.max_unit_bytes", "is negative");
  DTL_REQUIRE_ARG(!options_.offload || fsdp, fn, "options.offload",
                  std::string("is set in ") + sharding_mode_name(options_.mode) +
                      "; CPU offload is FSDP's (ZeRO-1/2 keep full parameters on the device)");
  // On a GPU (the handout's "On a GPU"): the shards, gradient shards and optimizer
  // state live there too, and the collectives are NCCL's on device memory. The
  // 16-bit rounding and fp16's found-inf check are written on host memory here,
  // and offload copies between host and device around them: both stay CPU-only.
  const std::vector<nn::Parameter*> all_params = model.parameters();
  compute_device_ = all_params.empty() ? nn::Device::kCpu : all_params.front()->value.device();
  if (compute_device_ == nn::Device::kCuda) {
    DTL_REQUIRE_ARG(pd == nn::DType::kF32 && !options_.offload, fn, "options",
                    "asks for a 16-bit param_dtype or offload on a GPU model; the GPU path of this lab is f32 "
                    "without offload");
  }
  const int units = model.unit_count();
  DTL_REQUIRE_ARG(options_.layouts.empty() || static_cast<int>(options_.layouts.size()) == units, fn,
                  "options.layouts",
                  "has " + std::to_string(options_.layouts.size()) + " layouts for " + std::to_string(units) + " units");
  const int world = backend.world_size();
  units_.resize(static_cast<std::size_t>(units));
  for (int u = 0; u < units; ++u) {
    UnitState& st = units_[static_cast<std::size_t>(u)];
    st.name = model.unit(u).name;
    std::vector<std::int64_t> numels;
    for (const nn::Parameter* p : model.unit(u).parameters()) numels.push_back(p->value.numel());
    DTL_REQUIRE_ARG(!numels.empty(), fn, "model", "unit '" + st.name + "' has no parameters");
    if (options_.layouts.empty()) {
      st.layout = make_flat_layout(numels, world);
    } else {
      st.layout = options_.layouts[static_cast<std::size_t>(u)];
      const std::string why = layout_mismatch(st.layout, numels, world);
      DTL_REQUIRE_ARG(why.empty(), fn, "options.layouts", "[" + std::to_string(u) + "] (unit '" + st.name + "') " + why);
    }
  }
  // BEGIN SOLUTION(ShardedTrainer::ShardedTrainer)
  // | Before any communication, refuse a unit whose full f32 FlatParameter is above
  // | options_.max_unit_bytes (when that is not 0): DTL_REQUIRE_ARG naming
  // | "options.max_unit_bytes", the unit's index and name and both byte counts. Then set up
  // | every unit as the first table at the top of this file says for the mode (what is a view, what
  // | owns storage, what is released), every rank starting from rank 0's values, with shard,
  // | grad_shard and the optimizer's state on state_device() and the optimizer over `shard`
  // | elements (Note [ZeRO stages]; Modes/Memory.* checks the bytes exactly; handout Task B).
  // | The buffers may live on a GPU, where span() throws.
  for (int u = 0; u < units; ++u) {
    const UnitState& st = units_[static_cast<std::size_t>(u)];
    const std::int64_t unit_bytes = st.layout.padded * 4;
    DTL_REQUIRE_ARG(options_.max_unit_bytes == 0 || unit_bytes <= options_.max_unit_bytes, fn,
                    "options.max_unit_bytes",
                    "is " + std::to_string(options_.max_unit_bytes) + " bytes, but unit " + std::to_string(u) + " ('" +
                        st.name + "') needs " + std::to_string(unit_bytes) + " bytes gathered (" +
                        std::to_string(st.layout.padded) + " f32 elements): split the unit or raise the budget");
  }
  const int rank = backend.rank();
  for (int u = 0; u < units; ++u) {
    UnitState& st = units_[static_cast<std::size_t>(u)];
    const std::vector<nn::Parameter*> params = model.unit(u).parameters();
    const std::int64_t begin = st.layout.shard_begin(rank), shard = st.layout.shard;
    st.full_values = nn::flatten_values(params, world);
    backend_.broadcast(st.full_values.raw(), static_cast<std::size_t>(st.layout.padded), DType::kF32, 0).wait();
    st.full_grads = nn::flatten_grads(params, world);
    if (fsdp) {
      st.shard = st.full_values.view(begin, {shard}).to(state_device());
      st.full_values.storage()->release();
    } else {
      st.shard = st.full_values.view(begin, {shard});
    }
    if (options_.mode == ShardingMode::kZero1) {
      st.grad_shard = st.full_grads.view(begin, {shard});
    } else {
      st.grad_shard = nn::Tensor::zeros({shard}, nn::DType::kF32, nn::MemoryCategory::kGradients, state_device());
      st.full_grads.storage()->release();
    }
    if (options_.optimizer == OptimizerKind::kSgd) {
      st.sgd = std::make_unique<nn::Sgd>(options_.sgd, shard, state_device());
    } else {
      st.adamw = std::make_unique<nn::AdamW>(options_.adamw, shard, state_device());
    }
  }
  // END SOLUTION

  // The hooks: the parameter side (task C, FSDP only) around the gradient side
  // (task B), the timeline's compute spans and the observer. Note [Gather and free].
  auto observe = [this](const char* phase, int u) {
    if (options_.observer) options_.observer(phase, u);
  };
  nn::ModelHooks& hooks = model_.hooks();
  hooks.pre_forward = [this, fsdp, observe](int u) {
    if (fsdp) gather_for_use(u, +1);
    observe("pre_forward", u);
    compute_begin_ = clock_seconds();
  };
  hooks.post_forward = [this, fsdp, observe](int u) {
    if (options_.timeline) options_.timeline->add("compute", "forward " + units_[static_cast<std::size_t>(u)].name, compute_begin_, clock_seconds());
    if (fsdp) free_params(u);
    observe("post_forward", u);
  };
  hooks.pre_backward = [this, fsdp, observe](int u) {
    if (fsdp) gather_for_use(u, -1);
    before_backward_grads(u);
    observe("pre_backward", u);
    compute_begin_ = clock_seconds();
  };
  hooks.post_backward = [this, fsdp, observe](int u) {
    if (options_.timeline) options_.timeline->add("compute", "backward " + units_[static_cast<std::size_t>(u)].name, compute_begin_, clock_seconds());
    after_backward_grads(u);
    if (fsdp) free_params(u);
    observe("post_backward", u);
  };
}

void ShardedTrainer::before_backward_grads(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::before_backward_grads)
  // | Before unit u's backward, its full gradient must exist and be zero (the tables at
  // | the top of this file say which modes keep it and which allocate it again).
  if (options_.mode == ShardingMode::kZero1) {
    st.full_grads.zero();
  } else {
    st.full_grads.storage()->allocate();
  }
  // END SOLUTION
}

void ShardedTrainer::after_backward_grads(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::after_backward_grads)
  // | After unit u's backward: with a 16-bit param_dtype the gradient first takes the values
  // | a 16-bit backward would have produced; then start the averaging reduce-scatter
  // | (ReduceOp::kAvg) of u's full gradient so that this rank's shard of the average lands in
  // | grad_shard (ZeRO-1 and offload in place, in this rank's own slice of full_grads: with
  // | offload no collective may touch host memory). Record and count it (reduce_scatters,
  // | reduce_scatter_bytes, reduce_order_) and keep at most options_.prefetch reduce-scatters
  // | in flight (Note [Reduce-scatter, not allreduce], Note [Gather and free]).
  if (options_.param_dtype != nn::DType::kF32) {
    for (float& g : st.full_grads.span<float>()) {
      g = options_.param_dtype == nn::DType::kF16 ? static_cast<float>(nn::f16(g)) : static_cast<float>(nn::bf16(g));
    }
  }
  float* full = st.full_grads.data<float>();
  const auto shard = static_cast<std::size_t>(st.layout.shard);
  const bool in_place = options_.mode == ShardingMode::kZero1 || options_.offload;
  void* recv = in_place ? static_cast<void*>(full + backend_.rank() * shard) : st.grad_shard.raw();
  st.reduce = backend_.reduce_scatter(full, recv, shard, DType::kF32, ReduceOp::kAvg);
  st.reduce_issued = true;
  ++current_.reduce_scatters;
  current_.reduce_scatter_bytes += st.layout.padded * 4;
  reduce_order_.push_back(u);
  while (static_cast<int>(reduce_order_.size()) > options_.prefetch) wait_reduce(reduce_order_.front());
  // END SOLUTION
}

void ShardedTrainer::wait_reduce(int u) {
  UnitState& st = units_.at(static_cast<std::size_t>(u));
  // BEGIN SOLUTION(ShardedTrainer::wait_reduce)
  // | Once this returns, unit u's reduce-scatter is complete and no longer pending
  // | (reduce_order_), its averaged shard is in grad_shard (offload: downloaded), and
  // | (ZeRO-2, FSDP) its full gradient's memory is given back.
  wait_timed(st.reduce, "reduce_scatter " + st.name);
  if (options_.offload) download_grad_shard(u);
  st.reduce_issued = false;
  reduce_order_.erase(std::find(reduce_order_.begin(), reduce_order_.end(), u));
  if (options_.mode != ShardingMode::kZero1) st.full_grads.storage()->release();
  // END SOLUTION
}

void ShardedTrainer::optimizer_step() {
  // BEGIN SOLUTION(ShardedTrainer::optimizer_step)
  // | Every unit's optimizer steps its shard with its grad_shard, where they live (on a
  // | GPU: a kernel on the compute stream).
  for (UnitState& st : units_) {
    if (st.sgd) st.sgd->step(st.shard, st.grad_shard);
    if (st.adamw) st.adamw->step(st.shard, st.grad_shard);
  }
  // END SOLUTION
}

StepResult ShardedTrainer::step(const nn::Tensor& x, const nn::Tensor& targets) {
  current_ = {};
  current_.scale = scale_;
  // BEGIN SOLUTION(ShardedTrainer::step)
  // | One training step on (x, y), returning in the state of the last row of the second table
  // | at the top of this file: the loss's gradient scaled by the loss scale, the per-unit work
  // | done by the hooks; with fp16 the update uses the unscaled gradients, and an inf/NaN on
  // | any rank makes every rank skip it and halve the scale. steps_ counts the updates, and
  // | the all-gathers (ZeRO-1/2) are counted. Fill current_ (loss, skipped, the counts)
  // | (Note [Mixed precision in FSDP], handout Task B).
  const double loss = loss_.forward(model_.forward(x), targets);
  model_.backward(loss_.backward(scale_));
  current_.loss = loss;
  while (!reduce_order_.empty()) wait_reduce(reduce_order_.front());
  if (options_.param_dtype == nn::DType::kF16) {
    const float inv = 1.0f / scale_;
    bool found = false;
    for (UnitState& st : units_) {
      for (float& g : st.grad_shard.span<float>()) {
        g *= inv;
        found = found || !std::isfinite(g);
      }
    }
    std::int32_t flag = found ? 1 : 0;
    backend_.allreduce_blocking(std::span<std::int32_t>(&flag, 1), ReduceOp::kSum);
    if (flag > 0) {
      current_.skipped = true;
      scale_ *= 0.5f;
      return current_;
    }
  }
  {
    const double begin = clock_seconds();
    optimizer_step();
    if (options_.timeline) options_.timeline->add("compute", "optimizer", begin, clock_seconds());
  }
  ++steps_;
  if (options_.mode != ShardingMode::kFsdp) {
    const auto rank = static_cast<std::size_t>(backend_.rank());
    for (UnitState& st : units_) {
      float* full = st.full_values.data<float>();
      const auto shard = static_cast<std::size_t>(st.layout.shard);
      st.gather = backend_.allgather(full + rank * shard, full, shard, DType::kF32);
      ++current_.allgathers;
      current_.allgather_bytes += st.layout.padded * 4;
    }
    for (UnitState& st : units_) wait_timed(st.gather, "allgather " + st.name);
  }
  // END SOLUTION
  if (options_.observer) options_.observer("step", -1);
  return current_;
}

}  // namespace dtl::lab06
