// Lab 04, task C: the reducer — gradient allreduces that overlap backward (its
// bookkeeping, statistics and destructor are given: given/reducer_bookkeeping.cc).
//
// What this file teaches: how DistributedDataParallel hides communication.
// One step, overlapped mode, 3 buckets (bucket 0 holds the last layers'
// gradients; see Note [Bucket order] in ddp_buckets.cc):
//
//   compute  | forward | bwd L3 | bwd L2 | bwd L1 | bwd L0 |  wait  | optimizer |
//   comm     |                  |  b0   |     b1     | b2 ....|
//                               ^ b0 full: issue    ^ b1 full    ^ b2 full (last)
//
// Only the part of the communication that runs past the end of backward is
// *exposed* (finish() waits for it); the rest is hidden. Naive and bucketed
// modes issue everything in finish(), after backward, so all of it is exposed.
//
// State per step: pending_[b] counts the parameters of bucket b that are not
// ready yet; ready_[i] marks parameter i ready (twice is an error); next_launch_
// is the first bucket not issued yet.
//
// Note [Issue in bucket order]
// ----------------------------
// The Communicator contract: every rank issues the same operations in the same
// order (a backend matches the k-th operation of one rank with the k-th of the
// others). The hooks need not fire in the same order everywhere: in PyTorch,
// unused parameters and dynamic graphs make the order differ between ranks. A
// reducer that issued each bucket the moment it filled could then issue
// bucket 2 before bucket 1 on one rank and after it on another, and the ranks
// would deadlock or reduce one bucket's gradients into another's. So buckets
// are issued strictly in bucket order: launch_ready_buckets() issues bucket
// next_launch_ only, and moves on while the next one is complete too. A bucket
// that fills early waits for the ones before it. In this lab's models that never
// happens (grad_ready fires in reverse parameter order, so buckets fill in bucket
// order, see Note [Bucket order] in ddp_buckets.cc); the rule is what keeps a
// reducer correct when it does.
//
// Note [Averaging]
// ----------------
// Each rank's loss is the mean over its B/W samples, so the average of the W
// ranks' gradients is the gradient of the mean over all B samples: the
// single-process gradient. With equal parameters at the start
// (broadcast_parameters()) every rank then takes the same optimizer step as one
// process with batch B, step after step, up to rounding (a sum of B/W rows and
// then of W means is not the one sum of B rows in float). ReduceOp::kAvg sums
// and divides once, at the end, in the backend (lab 03's rule). Dividing each
// rank's gradient by W before a sum gives the same result up to rounding; it
// costs a pass over the gradients, but keeps fp16 sums from overflowing (lab 05).
//
// Note [On a GPU, the issue is the event]
// ---------------------------------------
// With the model on a GPU, grad_ready fires when the kernels that compute the
// gradient are *queued* on the compute stream, not done. launch() is then the
// one place that orders communication after compute: NCCL's allreduce()
// records an event on the compute stream at the call and runs after it on a
// side stream (Note [Why a side stream] in harness/comm/nccl_communicator.h).
// Issued from the grad_ready of the bucket's last gradient, the event stands
// right after the kernels that wrote the bucket; issued earlier, it would
// reduce gradients not yet written. finish()'s waits make the compute stream
// wait for each allreduce's completion, so the optimizer step queued after
// finish() reads averaged gradients. The same code runs on both devices;
// tests/stream_order_test.cc checks the order on the CPU (handout, "On a GPU:
// streams and events").
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "lab04/ddp.h"

namespace dtl::lab04 {

Reducer::Reducer(Communicator& backend, nn::Model& model, ReducerOptions options)
    : backend_(backend), model_(model), options_(options) {
  check_model_agreement(backend_, model_);
  params_ = model_.parameters();
  std::vector<std::size_t> bytes;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->grad.dtype() != nn::DType::kF32) {
      throw InvalidArgument("Reducer: parameter '" + params_[i]->name + "' has a gradient that is not f32");
    }
    index_of_[params_[i]] = static_cast<int>(i);
    bytes.push_back(static_cast<std::size_t>(params_[i]->grad.bytes()));
  }
  // One flat buffer: every gradient becomes a view of it (no copies from here on).
  const nn::Tensor& flat = model_.flat_grads().defined() ? model_.flat_grads() : model_.flatten_grads();
  flat_grad_ = params_.empty() ? nullptr : flat.data<float>();
  // Naive: every parameter in a bucket of its own, last first. Otherwise the
  // buckets given in the options, or assign_buckets()'s under the caps.
  std::vector<std::vector<int>> groups;
  if (options_.mode == ReducerMode::kNaive) {
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) groups.push_back({i});
  } else if (!options_.buckets.empty()) {
    groups = options_.buckets;
  } else {
    groups = assign_buckets(bytes, options_.bucket_cap_bytes, options_.first_bucket_cap_bytes);
  }
  // Every parameter in exactly one bucket, or the step could never finish.
  const char* source = options_.buckets.empty() ? "assign_buckets() result" : "options.buckets";
  std::vector<int> seen(params_.size(), 0);
  for (const auto& group : groups) {
    DTL_REQUIRE_ARG(!group.empty(), "Reducer", source, "holds an empty bucket");
    for (int i : group) {
      DTL_REQUIRE_ARG(i >= 0 && static_cast<std::size_t>(i) < params_.size(), "Reducer", source,
                      "holds parameter index " + std::to_string(i) + ", outside [0, " +
                          std::to_string(params_.size()) + ")");
      DTL_REQUIRE_ARG(seen[static_cast<std::size_t>(i)]++ == 0, "Reducer", source,
                      "holds parameter " + std::to_string(i) + " twice");
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    DTL_REQUIRE_ARG(seen[i] == 1, "Reducer", source,
                    "leaves out parameter " + std::to_string(i) + " ('" + params_[i]->name + "')");
  }
  bucket_of_.assign(params_.size(), -1);
  // BEGIN SOLUTION(Reducer::Reducer)
  // | Fill buckets_ (one Bucket per group of `groups`, in order, with its parameters, its
  // | offset into the flat gradient buffer and its element count) and bucket_of_ (the bucket
  // | of every parameter index). A bucket must be one contiguous view of the flat buffer;
  // | throw dtl::Error if it is not (handout Task C, section (b)).
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.parameters = groups[b];
    bucket.offset = static_cast<std::size_t>(params_[static_cast<std::size_t>(groups[b].back())]->grad.offset() -
                                             flat.offset());
    std::size_t end = bucket.offset;
    for (auto it = groups[b].rbegin(); it != groups[b].rend(); ++it) {
      const nn::Tensor& g = params_[static_cast<std::size_t>(*it)]->grad;
      if (static_cast<std::size_t>(g.offset() - flat.offset()) != end) {
        throw Error("Reducer: bucket " + std::to_string(b) + " is not contiguous in the flat gradient buffer at '" +
                    params_[static_cast<std::size_t>(*it)]->name + "'");
      }
      end += static_cast<std::size_t>(g.numel());
      bucket_of_[static_cast<std::size_t>(*it)] = static_cast<int>(b);
    }
    bucket.count = end - bucket.offset;
    buckets_.push_back(std::move(bucket));
  }
  // END SOLUTION
  reset_step();
  model_.hooks().grad_ready = [this](nn::Parameter& p) { on_grad_ready(p); };
}

void Reducer::on_grad_ready(nn::Parameter& param) {
  if (no_sync_) return;  // accumulating locally: nothing to count, nothing to send
  const auto found = index_of_.find(&param);
  if (found == index_of_.end()) {
    throw Error("Reducer: grad_ready for '" + param.name + "', which was not a parameter of the model when the "
                "Reducer was made");
  }
  const auto i = static_cast<std::size_t>(found->second);
  // BEGIN SOLUTION(Reducer::on_grad_ready)
  // | Called by autograd once parameter i's gradient is final. A second call for the same
  // | parameter in one step throws dtl::Error naming the parameter and its bucket (a second
  // | backward without finish(): point at no_sync()). Track how many of its bucket's
  // | gradients are still missing; in overlapped mode a bucket's allreduce must start as soon
  // | as it can without breaking Note [Issue in bucket order] (handout Task C).
  const int b = bucket_of_[i];
  if (ready_[i]) {
    throw Error("Reducer: parameter '" + param.name + "' (bucket " + std::to_string(b) +
                ") got its gradient twice in one step: call finish() after every backward, or accumulate "
                "micro-steps inside no_sync()");
  }
  ready_[i] = 1;
  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped) {
    launch_ready_buckets();
  }
  // END SOLUTION
}

void Reducer::launch_ready_buckets() {
  // BEGIN SOLUTION(Reducer::launch_ready_buckets)
  // | Issue every bucket that may be issued now: complete, and every lower-numbered bucket
  // | already issued (Note [Issue in bucket order]). Every rank therefore issues the same
  // | buckets in the same order.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
  // END SOLUTION
}

// See Note [On a GPU, the issue is the event].
void Reducer::launch(std::size_t bucket) {
  const Bucket& bk = buckets_[bucket];
  if (bucket == 0) stats_ = StepStats{};
  ++stats_.allreduces;
  // BEGIN SOLUTION(Reducer::launch)
  // | Start the bucket's asynchronous averaging allreduce (ReduceOp::kAvg, f32) in place on
  // | its view of the flat gradient buffer, keep its Work in work_[bucket], and record
  // | stats_.first_issue_seconds when bucket 0 is issued (Note [Averaging]; handout Task C).
  if (bucket == 0) stats_.first_issue_seconds = clock_seconds();
  work_[bucket] = backend_.allreduce(flat_grad_ + bk.offset, bk.count, DType::kF32, ReduceOp::kAvg);
  // END SOLUTION
}

void Reducer::finish() {
  if (no_sync_) {
    throw Error("Reducer::finish() inside no_sync(): gradients are being accumulated, not averaged; finish() "
                "after the first backward outside the scope");
  }
  const double wait_begin = clock_seconds();
  // BEGIN SOLUTION(Reducer::finish)
  // | On return every gradient holds the average over ranks and the reducer is ready for the
  // | next step (reset_step()), with record_stats(wait_begin, now) done. Naive and bucketed
  // | modes issue their buckets here. Never wait for a bucket that was not issued: if a
  // | parameter never got its gradient, reset_step() and throw dtl::Error naming the first
  // | such parameter and its bucket (handout Task C).
  if (options_.mode != ReducerMode::kOverlapped) launch_ready_buckets();
  for (std::size_t b = 0; b < next_launch_; ++b) work_[b].wait();
  const double wait_end = clock_seconds();
  if (next_launch_ < buckets_.size()) {
    for (std::size_t b = next_launch_; b < buckets_.size(); ++b) {
      for (int i : buckets_[b].parameters) {
        if (!ready_[static_cast<std::size_t>(i)]) {
          const std::string name = params_[static_cast<std::size_t>(i)]->name;
          reset_step();
          throw Error("Reducer::finish(): parameter '" + name + "' (index " + std::to_string(i) + ", bucket " +
                      std::to_string(b) + ") did not get a gradient in this step, so bucket " + std::to_string(b) +
                      " and the ones after it were never reduced. Every parameter must take part in the loss "
                      "(or leave it out of the model)");
        }
      }
    }
  }
  record_stats(wait_begin, wait_end);
  reset_step();
  // END SOLUTION
}

Reducer::NoSync Reducer::no_sync() {
  // BEGIN SOLUTION(Reducer::no_sync)
  // | Return a NoSync scope during which on_grad_ready() does nothing, so gradients
  // | accumulate locally (its destructor ends it). Throw dtl::Error if a gradient was already
  // | marked ready this step (a scope starts between steps) or if a scope is already open
  // | (scopes do not nest) (handout Task C).
  if (no_sync_) {
    throw Error("Reducer::no_sync(): already inside a no_sync() scope; scopes do not nest (end the outer one "
                "first)");
  }
  if (std::any_of(ready_.begin(), ready_.end(), [](char r) { return r != 0; })) {
    throw Error("Reducer::no_sync(): a step is half done (some gradients were already reduced or counted); start "
                "the scope before the micro-step's backward");
  }
  no_sync_ = true;
  return NoSync(this);
  // END SOLUTION
}

}  // namespace dtl::lab04
