// Lab 08 benchmark, what its two files share (one benchmark program, ./dtl bench 08):
//   tensor_parallel_bench.cc  the GPT rows: plain tensor parallelism and sequence
//                             parallelism on each link, SP against TP paired, the
//                             graded row (See Note [The graded row] there), the GPU
//                             model and the traces; it registers every row, in order;
//   overlap_bench.cc          task F's rows: the row-parallel allreduce overlapped with
//                             its GEMM (Overlap/<link>/T<T>/k<k>).
// Shared: the bench's GPT shape, its tensor-parallel step on the first T ranks, the
// waits that keep the ranks outside the group off the cores, and the row registration.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/comm/backends.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/testing/recording_communicator.h"
#include "lab08/tensor_parallel.h"

namespace lab08_bench {

namespace nn = dtl::nn;
namespace lab08 = dtl::lab08;
using dtl::bench::comm;

// The model: V 128, context 32, C 128, 4 heads, 2 blocks; batch 8 (N = 256 tokens).
inline constexpr std::int64_t kVocab = 128, kContext = 32, kChannels = 128, kHeads = 4, kBatch = 8;
inline constexpr int kLayers = 2;

inline std::string backend_of(const std::string& link) {
  return link == "mpi" ? "mpi-thread" : "emulated:" + link;
}

/// One tensor-parallel GPT on the first T ranks, its loss and a batch.
struct TpGpt {
  dtl::Comm sub;  // the first T ranks of the world (empty on the others)
  std::unique_ptr<dtl::Communicator> backend;
  std::unique_ptr<dtl::testing::RecordingCommunicator> record;
  nn::Model model{nn::DType::kF32};
  std::unique_ptr<lab08::VocabParallelCrossEntropy> loss;
  nn::Tensor x, y;
  std::int64_t param_bytes = 0;
  bool sequence_parallel = false;
  std::vector<nn::Parameter*> replicated;  // with sequence parallelism: LayerNorms, row-parallel biases

  TpGpt(int T, const std::string& link, bool sp = false) : sub(dtl::bench::first_ranks(T)), sequence_parallel(sp) {
    if (sub.get() == MPI_COMM_NULL) return;
    if (link == "polling") {  // the graded row's backend (See Note [The graded row])
      backend = std::make_unique<dtl::MpiCommunicator>(sub, dtl::MpiMode::kPolling);
    } else {
      backend = dtl::make_backend(backend_of(link), sub, {}, "mpi-thread", "mpi-thread, emulated:LINK");
    }
    record = std::make_unique<dtl::testing::RecordingCommunicator>(*backend);
    const std::int64_t before = nn::memory_tracker().current(nn::MemoryCategory::kParameters);
    {
      nn::Model full = nn::make_gpt(kVocab, kContext, kChannels, kHeads, kLayers, 7);
      model = lab08::make_tensor_parallel_gpt(full, *record, sp);
    }  // each rank keeps its slices only
    param_bytes = nn::memory_tracker().current(nn::MemoryCategory::kParameters) - before;
    if (sp) replicated = lab08::sequence_parallel_parameters(model);
    loss = std::make_unique<lab08::VocabParallelCrossEntropy>(*record, kVocab);
    x = nn::Tensor::zeros({kBatch, kContext}, nn::DType::kI32, nn::MemoryCategory::kOther);
    y = nn::Tensor::zeros({kBatch, kContext}, nn::DType::kI32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      x.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % kVocab);
      y.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 11 + 3) % kVocab);
    }
  }
  bool member() const { return record != nullptr; }
  void step() {
    if (!member()) return;
    record->clear();
    model.zero_grad();
    loss->forward(model.forward(x), y);
    model.backward(loss->backward());
    if (sequence_parallel) lab08::allreduce_sequence_parallel_gradients(*record, replicated);
  }
  // The activation bytes the model's forward keeps for backward (MemoryCategory::
  // kActivations, this rank): its slot freed first, so every buffer is made anew.
  std::int64_t forward_activation_bytes() {
    if (!member()) return 0;
    model.release_slot(0);
    const std::int64_t before = nn::memory_tracker().current(nn::MemoryCategory::kActivations);
    const nn::Tensor& logits = model.forward(x);
    const std::int64_t bytes = nn::memory_tracker().current(nn::MemoryCategory::kActivations) - before;
    loss->forward(logits, y);  // finish the step, so the next one starts as every step does
    model.backward(loss->backward());
    return bytes;
  }
  // Seconds from issue to completion of the collectives of the last step, summed.
  double comm_seconds() const {
    double s = 0.0;
    if (member()) {
      for (const auto& op : record->ops()) s += std::max(0.0, op.end - op.issue);
    }
    return s;
  }
  // The link's share: the alpha-beta model's seconds for the collectives the last
  // step issued (as recorded), on an emulated link; 0 on real shared memory.
  double link_seconds(const std::string& link) const {
    double s = 0.0;
    if (member() && link != "mpi") {
      const dtl::LinkModel model_of_link = dtl::link_by_name(link);
      for (const auto& op : record->ops()) {
        s += dtl::model_seconds(model_of_link, op.kind, op.bytes, record->world_size());
      }
    }
    return s;
  }
};

// Waits for a nonblocking collective while sleeping between tests: a rank outside
// the tensor group (T < world) must not spin in MPI and take a core from the ranks
// that compute (4 ranks share 2 cores here).
inline void wait_sleeping(MPI_Request& request) {
  for (int done = 0; !done;) {
    DTL_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

inline double world_max(double v) {
  double out = 0.0;
  MPI_Request request = MPI_REQUEST_NULL;
  DTL_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm(), &request));
  wait_sleeping(request);
  return out;
}

inline void barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  DTL_MPI_CHECK(MPI_Ibarrier(comm(), &request));
  wait_sleeping(request);
}

inline void add(const std::string& name, std::function<void(benchmark::State&)> fn, int iterations) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
      ->Iterations(iterations)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

/// Task F's rows, Overlap/<link>/T<T>/k<k>, for each T of `sizes` (overlap_bench.cc).
void register_overlap_rows(const std::vector<int>& sizes, bool quick);

}  // namespace lab08_bench
