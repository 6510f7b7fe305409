// Lab 08 benchmark: one training step of a small GPT, tensor-parallel over T = 1,
// 2, 4 ranks, on real Open MPI shared memory and on EMULATED links (NVLink-class
// and 10 GbE, harness/comm/emulated_communicator.h); per step: the step time, the
// time spent in collectives, the link's share of it, how many collectives there
// were and their bytes (recorded at the Communicator, never computed from the
// formulas), and the parameter bytes per rank. Then the same arithmetic for a
// GPT-3-sized block on a GPU node (the alpha-beta model and an assumed GPU speed:
// a model, not a measurement), which is why tensor parallelism stays inside a
// node (Note [Why TP stays inside a node]).
//
// Rows: <link>/T<T>, link in {mpi, NVLink4, 10GbE}; T = 1 is one process (its
// collectives are over a group of one). <link>/T<T>/sp: the same GPT with sequence
// parallelism (Note [Sequence parallelism]: the LayerNorm and residual regions on
// S/T tokens of every sequence), its replicated gradients summed in the step.
// SP/T<T>/vs-tp: the sequence-parallel step paired with the plain tensor-parallel
// step, back to back on the same ranks (Open MPI, polling), their ratio per pair. The first T ranks form the group; the
// others wait (`./dtl bench 08 -n 4` for T = 4: 4 ranks on 2 cores are
// oversubscribed, so T = 4's compute is slower than it would be on 4 cores).
// Columns: step (ms) median of the slowest rank; comm (ms) the median per step of
// the time from issuing each collective to its completion, summed (every layer
// waits at once, so this is time on the critical path: the link, and waiting for
// the slowest rank to arrive); link (ms) the alpha-beta model's time of the
// recorded collectives on the emulated link (its share of comm); ops and MiB per
// step (sum of OpInfo::total_bytes()); params (KiB) per rank (the memory tracker);
// acts (KiB) the activation bytes (MemoryCategory::kActivations) the model's forward
// keeps for backward, per rank (Note [Activation memory with sequence parallelism]);
// TP (ms) and SP/TP: the plain TP step and the paired ratio of the SP/T<T>/vs-tp rows.
//
// Rows Overlap/<link>/T<T>/k<k> (task F; See Note [Overlapping the row-parallel
// allreduce] in lab08/overlapped_linear.h): the GPT's MLP output projection alone
// (RowParallelLinear(4C = 512 -> C = 128) on the N = 256 tokens, f32), the plain
// layer and the overlapped one with k row chunks, one forward of each per
// iteration, on an emulated link. Columns: step (ms) the overlapped forward;
// exposed (us) the link time it left exposed: its collectives replayed on the link
// model from this rank's own issue times, as the emulator times them, past the
// last issue (the end of the computation); plain (us) the same for the plain layer
// (it waits at once: the whole allreduce); hidden (%) = 1 - exposed / plain;
// bound (%) the closed form's 1 - (last chunk's allreduce) / (the whole one);
// waited (%) the same share from the wall-clock time spent in Work::wait(), which
// adds the other rank's lateness and the real backend's latency; diff the largest
// |y_overlapped - y_plain| / (1 + |y_plain|). Medians over the iterations.
//
// Files, in $DTL_TRACE_OUT (./dtl bench sets build/bench-out):
// lab08_trace_t<T>_<link>.json (T = min(world, 4), 10GbE and NVLink4): one step,
// a "compute" track with each unit's forward and backward and a "comm" track with
// every collective; open in https://ui.perfetto.dev.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/bench/timeline.h"
#include "harness/comm/backends.h"
#include "harness/comm/mpi_comm.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "harness/testing/recording_communicator.h"
#include "lab08/overlapped_linear.h"
#include "lab08/tensor_parallel.h"

namespace {

namespace nn = dtl::nn;
namespace lab08 = dtl::lab08;
using dtl::bench::comm;

// The model: V 128, context 32, C 128, 4 heads, 2 blocks; batch 8 (N = 256 tokens).
constexpr std::int64_t kVocab = 128, kContext = 32, kChannels = 128, kHeads = 4, kBatch = 8;
constexpr int kLayers = 2;

std::string backend_of(const std::string& link) { return link == "mpi" ? "mpi-thread" : "emulated:" + link; }

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
void wait_sleeping(MPI_Request& request) {
  for (int done = 0; !done;) {
    DTL_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

double world_max(double v) {
  double out = 0.0;
  MPI_Request request = MPI_REQUEST_NULL;
  DTL_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm(), &request));
  wait_sleeping(request);
  return out;
}

void barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  DTL_MPI_CHECK(MPI_Ibarrier(comm(), &request));
  wait_sleeping(request);
}

bool g_teaching_rows_ran = false;  // the traces come with these rows only

void tp_row(benchmark::State& state, int T, const std::string& link, bool sp) {
  g_teaching_rows_ran = true;
  TpGpt gpt(T, link, sp);
  gpt.step();  // warm-up
  const auto acts = static_cast<double>(gpt.forward_activation_bytes());
  std::vector<double> steps, comms;
  double ops = 0.0, bytes = 0.0, link_s = 0.0;
  for (auto _ : state) {
    barrier();
    const double t0 = dtl::clock_seconds();
    gpt.step();
    const double step = world_max(dtl::clock_seconds() - t0);
    comms.push_back(world_max(gpt.comm_seconds()));
    steps.push_back(step);
    state.SetIterationTime(step);
    link_s = gpt.link_seconds(link);
    if (gpt.member()) {
      ops = static_cast<double>(gpt.record->ops().size());
      bytes = 0.0;
      for (const auto& op : gpt.record->ops()) bytes += static_cast<double>(op.bytes);
    }
  }
  state.counters["step_ms"] = dtl::bench::median(steps) * 1e3;
  state.counters["comm_ms"] = dtl::bench::median(comms) * 1e3;
  state.counters["link_ms"] = world_max(link_s) * 1e3;
  state.counters["ops"] = world_max(ops);
  state.counters["mib"] = world_max(bytes) / (1024.0 * 1024.0);
  state.counters["params"] = world_max(static_cast<double>(gpt.param_bytes)) / 1024.0;
  state.counters["acts"] = world_max(acts) / 1024.0;
}

// Sequence parallelism against plain tensor parallelism, paired: the same GPT both ways
// on the same T ranks, each step of one beside a step of the other (order alternating).
// The ranks outside the group (T < world) time empty steps. Goal: ratio <= 1.05.
void sp_vs_tp_row(benchmark::State& state, int T) {
  TpGpt sp(T, "polling", true);
  TpGpt tp(T, "polling", false);
  sp.step();  // warm-up
  tp.step();
  dtl::bench::PairedTimer timer;
  for (auto _ : state) state.SetIterationTime(timer.time_pair([&] { sp.step(); }, [&] { tp.step(); }));
  state.counters["step_ms"] = timer.impl_median() * 1e3;
  state.counters["tp_ms"] = timer.vendor_median() * 1e3;
  state.counters["sp_ratio"] = timer.ratio_median();
}

// ---------------------------------------------------------------------------
// Task F: the row-parallel allreduce overlapped with its GEMM
// ---------------------------------------------------------------------------

/// Between a layer and its emulated link: when each collective was issued and how
/// big it was, and how long the caller waited in Work::wait()/test().
class OverlapClock final : public dtl::Communicator {
 public:
  OverlapClock(dtl::Communicator& inner, dtl::LinkModel link) : inner_(inner), link_(std::move(link)) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string name() const override { return "overlap clock over " + inner_.name(); }

  void reset() {
    issued_.clear();
    waited_ = 0.0;
  }
  /// Seconds the caller spent waiting (wall clock: the link, the other rank's lateness, the real backend).
  double waited() const { return waited_; }
  /// The link's exposed time, from this rank's own issue times: the collectives replayed
  /// on the link model as the emulator does (one at a time, FIFO, each from max(its
  /// issue, the previous one's end)), minus what ran before the last issue (the end of
  /// the layer's computation). Neither the other rank's lateness nor the real backend
  /// underneath count here: only whether the computation covered the link.
  double exposed() const {
    double free = 0.0, last_issue = 0.0;
    for (const auto& [issue, kind, bytes] : issued_) {
      free = std::max(free, issue) + dtl::model_seconds(link_, kind, bytes, world_size());
      last_issue = issue;
    }
    return issued_.empty() ? 0.0 : std::max(0.0, free - last_issue);
  }

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    note(info);
    return timed(inner_.allreduce(buf, info.count, info.dtype, info.op), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_broadcast(void* buf, const dtl::OpInfo& info) override {
    note(info);
    return timed(inner_.broadcast(buf, info.count, info.dtype, info.root), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void* send, void* recv, const dtl::OpInfo& info) override {
    note(info);
    return timed(inner_.reduce_scatter(send, recv, info.count, info.dtype, info.op), info);
  }
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void* send, void* recv, const dtl::OpInfo& info) override {
    note(info);
    return timed(inner_.allgather(send, recv, info.count, info.dtype), info);
  }

 private:
  class Timed final : public dtl::WorkImpl {
   public:
    Timed(dtl::Work work, const dtl::OpInfo& info, double& waited)
        : dtl::WorkImpl(info.description), work_(std::move(work)), waited_(waited) {}
    bool test() override { return clocked([&] { return work_.test(); }); }
    bool wait_until(double deadline) override {
      return clocked([&] { return work_.wait_for(std::max(0.0, deadline - dtl::clock_seconds())); });
    }

   private:
    template <typename F>
    bool clocked(F&& f) {
      const double t0 = dtl::clock_seconds();
      const bool done = f();
      waited_ += dtl::clock_seconds() - t0;
      if (done) {
        set_start(work_.start_seconds());
        set_end(work_.end_seconds());
      }
      return done;
    }
    dtl::Work work_;
    double& waited_;
  };
  void note(const dtl::OpInfo& info) { issued_.push_back({dtl::clock_seconds(), info.kind, info.total_bytes()}); }
  std::unique_ptr<dtl::WorkImpl> timed(dtl::Work work, const dtl::OpInfo& info) {
    return std::make_unique<Timed>(std::move(work), info, waited_);
  }
  struct Issued {
    double issue;
    dtl::CollectiveKind kind;
    std::size_t bytes;
  };
  dtl::Communicator& inner_;
  dtl::LinkModel link_;
  std::vector<Issued> issued_;
  double waited_ = 0.0;
};

/// The MLP's output projection of the bench's GPT, plain and overlapped, on the first T ranks.
struct OverlapPair {
  static constexpr std::int64_t kIn = 4 * kChannels, kOut = kChannels, kRows = kBatch * kContext;
  dtl::Comm sub;
  std::unique_ptr<dtl::Communicator> backend;
  std::unique_ptr<OverlapClock> clock;
  std::unique_ptr<lab08::RowParallelLinear> plain;
  std::unique_ptr<lab08::OverlappedRowParallelLinear> overlapped;
  nn::Tensor x;  // this rank's input features, (N, 4C/T)

  OverlapPair(int T, const std::string& link, int chunks) : sub(dtl::bench::first_ranks(T)) {
    if (sub.get() == MPI_COMM_NULL) return;
    // Under the emulator, Open MPI with a sleeping progress thread: a communication
    // thread would spin in each blocking collective and slow the GEMMs it should hide
    // behind (See Note [The graded row]).
    backend = dtl::make_backend(backend_of(link), sub, {}, "mpi-polling", "mpi-polling, emulated:LINK");
    clock = std::make_unique<OverlapClock>(*backend, dtl::link_by_name(link));
    dtl::Rng rng(11);
    nn::Linear full("proj", kIn, kOut, nn::DType::kF32, rng, 0.02, true);
    plain = std::make_unique<lab08::RowParallelLinear>(full, *clock);
    overlapped = lab08::make_overlapped(*plain, *clock, chunks);
    x = nn::Tensor::zeros({kRows, kIn / T}, nn::DType::kF32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      x.span<float>()[i] = static_cast<float>(((i * 37 + 11 * backend->rank()) % 101) - 50) / 50.0f;
    }
  }
  bool member() const { return clock != nullptr; }
  struct Times {
    double forward = 0.0, exposed = 0.0, waited = 0.0;
  };
  // One forward of `layer`: its wall time, the link's exposed time, the time waited.
  Times run(nn::Layer& layer) {
    if (!member()) return {};
    clock->reset();
    const double t0 = dtl::clock_seconds();
    layer.forward(x);
    return {dtl::clock_seconds() - t0, clock->exposed(), clock->waited()};
  }
  // max |y_overlapped - y_plain| / (1 + |y_plain|), after one forward of each.
  double difference() {
    if (!member()) return 0.0;
    const nn::Tensor want = plain->forward(x).clone(nn::MemoryCategory::kOther);
    const nn::Tensor& got = overlapped->forward(x);
    double most = 0.0;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      const double w = want.span<float>()[i], g = got.span<float>()[i];
      most = std::max(most, std::abs(g - w) / (1.0 + std::abs(w)));
    }
    return most;
  }
};

// The closed form's hidden share on `link`: all but the last chunk's allreduce hidden.
double hidden_bound(const std::string& link, int T, int chunks) {
  const dtl::LinkModel model = dtl::link_by_name(link);
  const std::int64_t rows = OverlapPair::kRows, k = std::min<std::int64_t>(chunks, rows);
  const std::int64_t last_rows = rows - (k - 1) * rows / k;
  const auto row_bytes = static_cast<std::size_t>(OverlapPair::kOut * 4);
  const double whole = dtl::model_seconds(model, dtl::CollectiveKind::kAllreduce, rows * row_bytes, T);
  const double last = dtl::model_seconds(model, dtl::CollectiveKind::kAllreduce, last_rows * row_bytes, T);
  return 1.0 - last / whole;
}

void overlap_row(benchmark::State& state, int T, const std::string& link, int chunks) {
  OverlapPair pair(T, link, chunks);
  const double diff = world_max(pair.difference());  // also the warm-up
  std::vector<double> forwards, exposed, plain_exposed, waited, plain_waited;
  for (auto _ : state) {
    barrier();
    const OverlapPair::Times p = pair.run(*pair.plain);
    plain_exposed.push_back(world_max(p.exposed));
    plain_waited.push_back(world_max(p.waited));
    barrier();
    const OverlapPair::Times o = pair.run(*pair.overlapped);
    const double forward = world_max(o.forward);
    exposed.push_back(world_max(o.exposed));
    waited.push_back(world_max(o.waited));
    forwards.push_back(forward);
    state.SetIterationTime(forward);
  }
  auto share = [](double with, double without) { return without > 0.0 ? 100.0 * (1.0 - with / without) : 0.0; };
  const double e = dtl::bench::median(exposed), pe = dtl::bench::median(plain_exposed);
  state.counters["step_ms"] = dtl::bench::median(forwards) * 1e3;
  state.counters["exposed_us"] = e * 1e6;
  state.counters["plain_us"] = pe * 1e6;
  state.counters["hidden"] = share(e, pe);
  state.counters["bound"] = 100.0 * hidden_bound(link, T, chunks);
  state.counters["wall_hidden"] = share(dtl::bench::median(waited), dtl::bench::median(plain_waited));
  state.counters["diff"] = diff;
}

void add(const std::string& name, std::function<void(benchmark::State&)> fn, int iterations) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
      ->Iterations(iterations)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// Note [Why TP stays inside a node], in numbers: a GPT-3-sized block (C = 12288) on
// 2048 tokens in bf16, T = 8, compute at an assumed 400 TFLOP/s per GPU. A model.
void print_gpu_model() {
  if (comm().rank() != 0) return;
  const double C = 12288, N = 2048, T = 8, flops_per_s = 400e12;
  const double block_flops = 3 * 2 * 12 * C * C * N;  // forward 2 x (12 C^2) x N, backward twice that
  const double compute = block_flops / T / flops_per_s;
  const auto bytes = static_cast<std::size_t>(N * C * 2);  // one bf16 activation (N, C)
  std::printf("# model (not measured): one GPT-3-sized block (C 12288, 2048 tokens, bf16), T = 8, "
              "compute %.1f ms per GPU at 400 TFLOP/s; its 4 allreduces of %s each:\n",
              compute * 1e3, dtl::format_bytes(bytes).c_str());
  for (const char* name : {"NVLink4", "IB-HDR", "100GbE", "10GbE"}) {
    const dtl::LinkModel link = dtl::link_by_name(name);
    const double comm_s = 4 * dtl::model_seconds(link, dtl::CollectiveKind::kAllreduce, bytes, 8);
    std::printf("#   %-8s %9.2f ms of allreduce per block = %6.2f x the compute\n", name, comm_s * 1e3,
                comm_s / compute);
  }
}

// ---------------------------------------------------------------------------
// The graded row
// ---------------------------------------------------------------------------
//
// Note [The graded row]
// ---------------------
// The grader's speed item (grader/rubrics/08.toml) runs Grade/T2/polling for the
// submission and for the reference: your tensor-parallel GPT step at T = 2 (impl)
// paired with the same GPT's step in one process (vendor column: nn::make_gpt and
// its plain cross-entropy, the harness's code only), each rank running both, back
// to back. ratio = T = 2 step / one-process step per pair: a busy machine slows both
// halves of a pair alike, so the ratio keeps what the split saves (each rank does
// half of every matmul) and what its collectives cost. The backend is Open MPI
// with a sleeping progress thread (MpiMode::kPolling): a communication thread
// would spin inside each blocking collective and take the cores the compute needs.
// A layer that computes the whole product and keeps its slice, or gathers what
// it could have kept split, is correct and shows here as a larger ratio.
struct FullGpt {
  nn::Model model = nn::make_gpt(kVocab, kContext, kChannels, kHeads, kLayers, 7);
  nn::SoftmaxCrossEntropy loss;
  nn::Tensor x, y;
  FullGpt() {
    x = nn::Tensor::zeros({kBatch, kContext}, nn::DType::kI32, nn::MemoryCategory::kOther);
    y = nn::Tensor::zeros({kBatch, kContext}, nn::DType::kI32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      x.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % kVocab);
      y.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 11 + 3) % kVocab);
    }
  }
  void step() {
    model.zero_grad();
    loss.forward(model.forward(x), y);
    model.backward(loss.backward());
  }
};

void grade_row(benchmark::State& state) {
  TpGpt gpt(2, "polling");
  FullGpt full;
  gpt.step();  // warm-up
  full.step();
  dtl::bench::PairedTimer timer;
  for (auto _ : state) state.SetIterationTime(timer.time_pair([&] { gpt.step(); }, [&] { full.step(); }));
  state.counters["step_ms"] = timer.impl_median() * 1e3;
  state.counters["vendor_ms"] = timer.vendor_median() * 1e3;
  state.counters["ratio"] = timer.ratio_median();
}

void register_rows() {
  if (comm().size() == 2) {
    add("Grade/T2/polling", grade_row, dtl::bench::quick() ? 5 : 15);
  }
  print_gpu_model();
  const int world = comm().size();
  const bool quick = dtl::bench::quick();
  const int iterations = quick ? 3 : 15;
  std::vector<int> sizes;
  for (int T : {1, 2, 4}) {
    if (T <= world && (!quick || T == 1 || T == std::min(world, 4))) sizes.push_back(T);
  }
  if (comm().rank() == 0) {
    std::printf("# %d ranks; GPT V %lld, context %lld, C %lld, %lld heads, %d blocks, batch %lld (N = %lld tokens); "
                "T = 4 needs -n 4\n",
                world, static_cast<long long>(kVocab), static_cast<long long>(kContext),
                static_cast<long long>(kChannels), static_cast<long long>(kHeads), kLayers,
                static_cast<long long>(kBatch), static_cast<long long>(kBatch * kContext));
  }
  for (const std::string link : {"mpi", "NVLink4", "10GbE"}) {
    for (int T : sizes) {
      if (T == 1 && link != "mpi") continue;  // a group of one sends nothing
      add(link + "/T" + std::to_string(T), [T, link](benchmark::State& s) { tp_row(s, T, link, false); },
          iterations);
      if (T > 1) {
        add(link + "/T" + std::to_string(T) + "/sp", [T, link](benchmark::State& s) { tp_row(s, T, link, true); },
            iterations);
      }
    }
  }
  for (int T : sizes) {
    if (T > 1) {
      add("SP/T" + std::to_string(T) + "/vs-tp", [T](benchmark::State& s) { sp_vs_tp_row(s, T); },
          quick ? 5 : 4 * iterations);
    }
  }
  // 1GbE: a link the GEMM cannot cover (a chunk's allreduce outlasts a chunk's GEMM),
  // where the measured share falls below the closed form's bound.
  for (const std::string link : {"NVLink4", "10GbE", "1GbE"}) {
    for (int T : sizes) {
      if (T == 1) continue;
      for (int k : {2, 4, 8}) {
        if ((quick && k != 4) || (link == "1GbE" && (quick || k != 4))) continue;
        add("Overlap/" + link + "/T" + std::to_string(T) + "/k" + std::to_string(k),
            [T, link, k](benchmark::State& s) { overlap_row(s, T, link, k); }, quick ? 5 : 41);
      }
    }
  }
}

// One step on emulated links, recorded: compute spans per unit, comm spans per collective.
void write_traces() {
  if (!g_teaching_rows_ran) return;
  const char* dir = std::getenv("DTL_TRACE_OUT");
  const std::string folder = dir != nullptr && *dir != '\0' ? dir : ".";
  const int T = std::min(comm().size(), 4);
  if (T < 2) return;
  for (const std::string link : {"10GbE", "NVLink4"}) {
    TpGpt gpt(T, link);
    dtl::Timeline timeline(comm().rank(), "tp rank " + std::to_string(comm().rank()));
    std::vector<double> begin(static_cast<std::size_t>(gpt.model.unit_count()), 0.0);
    if (gpt.member()) {
      nn::ModelHooks& hooks = gpt.model.hooks();
      hooks.pre_forward = [&](int u) { begin[static_cast<std::size_t>(u)] = dtl::clock_seconds(); };
      hooks.post_forward = [&](int u) {
        timeline.add("compute", "F " + gpt.model.unit(u).name, begin[static_cast<std::size_t>(u)],
                     dtl::clock_seconds());
      };
      hooks.pre_backward = hooks.pre_forward;
      hooks.post_backward = [&](int u) {
        timeline.add("compute", "B " + gpt.model.unit(u).name, begin[static_cast<std::size_t>(u)],
                     dtl::clock_seconds());
      };
    }
    gpt.step();  // warm-up
    timeline.clear();
    barrier();
    gpt.step();
    if (gpt.member()) {
      for (const auto& op : gpt.record->ops()) {
        timeline.add("comm", dtl::collective_name(op.kind), op.issue, std::max(op.issue, op.end),
                     {{"bytes", dtl::format_bytes(op.bytes)}});
      }
    }
    const std::string path = folder + "/lab08_trace_t" + std::to_string(T) + "_" + link + ".json";
    timeline.write_gathered(comm(), path);
    if (comm().rank() == 0) {
      std::printf("# one step at T = %d over emulated %s: trace %s\n", T, link.c_str(), path.c_str());
    }
  }
}

const bool registered = [] {
  dtl::bench::set_columns({{"step_ms", "step (ms)", "%10.2f"},
                           {"comm_ms", "comm (ms)", "%10.2f"},
                           {"link_ms", "link (ms)", "%10.3f"},
                           {"ops", "ops", "%5.0f"},
                           {"mib", "MiB/step", "%9.2f"},
                           {"params", "params (KiB)", "%13.0f"},
                           {"exposed_us", "exposed (us)", "%12.1f"},
                           {"plain_us", "plain (us)", "%10.1f"},
                           {"hidden", "hidden (%)", "%10.0f"},
                           {"bound", "bound (%)", "%10.0f"},
                           {"wall_hidden", "waited (%)", "%10.0f"},
                           {"diff", "diff", "%9.1e"},
                           {"acts", "acts (KiB)", "%10.0f"},
                           {"tp_ms", "TP (ms)", "%10.2f"},
                           {"sp_ratio", "SP/TP", "%8.3f"}});
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(write_traces);
  return true;
}();

}  // namespace
