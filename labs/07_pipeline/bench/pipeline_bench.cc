// Lab 07 benchmark: step time and bubble of naive model parallelism, GPipe and
// 1F1B across m = 1 .. 16 micro-batches at P = 2, 3, 4 stages; the measured bubble
// against (P - 1)/(m + P - 1); peak activation memory per stage; the imbalance of
// a cut by parameters against a cut by measured time; a Chrome trace and the
// classic pipeline picture (stages x time, F and B blocks coloured per
// micro-batch) drawn from the real events.
//
// Three kinds of rows (the first P ranks form the pipeline; `./dtl bench 07 -n 4`
// for P = 3 and 4):
//   Emulated/P<P>/<schedule>/m<m>   EMULATED compute: every stage is one unit whose
//       layer *sleeps* (forward 20 ms per batch, backward twice that, split over the
//       micro-batches by rows), messages over real Open MPI shared memory.
//       Sleeping leaves the cores free, so 4 ranks on 2 cores measure the schedule,
//       not the machine's oversubscription, and the stages are balanced by
//       construction: the setting of the bubble formula.
//   Link1GbE/P<P>/<schedule>/m<m>   the same plus an EMULATED 1 GbE link: each
//       stage's first layer sleeps alpha + bytes/B for the activation it receives
//       and for the gradient it sends back (serialized with compute: no overlap).
//   Real/P2/<schedule>/m<m>         REAL compute: an MLP (in 64, 8 layers of 512)
//       on 2 ranks (2 cores: not oversubscribed), with peak activation memory.
//   Grade/P2/1f1b/m8   the grader's row (grader/rubrics/07.toml's two speed items):
//       the emulated pipeline at P = 2, m = 8 under 1F1B; its step time (the bubble)
//       and stage 0's peak activation memory are each graded against the reference's.
//       Under 1F1B stage 0 holds at most P micro-batches' activations, under GPipe all
//       m: a GPipe submitted as 1F1B takes the same time (the bubble is the same,
//       Note [GPipe and 1F1B]) and m / P = 4 times the memory.
//   Interleaved/P<P>/v<v>/m<m>   Megatron's interleaved 1F1B (task F): the emulated
//       pipeline cut into v P virtual stages, each sleeping 1/v as long, run by the
//       given InterleavedStage; v = 1 is 1F1B through the same executor. Bubble
//       against (P - 1)/(v m + P - 1), and the messages per step it costs.
//       .../m<2P>/x5: the same with every sleep 5 times as long (as the ZeroBubble
//       rows), so that each op's fixed cost weighs less against its work.
//   ZeroBubble/P<P>/<1f1b|zbh1>/m<m>   ZB-H1 (task G) against 1F1B through the same
//       executor (InterleavedStage, one chunk), emulated compute with t_F = t_B = t_W
//       (20 ms per batch each: 1F1B's fused backward sleeps 40 ms, ZB-H1's B and W
//       20 ms each). theory % = (P - 1)/(m + P - 1) for 1F1B and (P - 1)/(3 m + P - 1)
//       for ZB-H1 (Note [Zero bubble]); stash = the most micro-batches any stage holds
//       from F to its W (to its backward under 1F1B), counted from the schedule.
// Columns: step (ms) median of the slowest rank; bubble % = 1 - busy / step,
// averaged over the stages (busy = the stage's F and B compute spans); theory % =
// (P - 1)/(m + P - 1); ratio = bubble / theory; act0 / actL (KiB) = peak
// MemoryCategory::kActivations of stage 0 and of the last stage (Real rows).
//
// Files, in $DTL_TRACE_OUT (./dtl bench sets build/bench-out): lab07_trace_<schedule>.json
// (every rank a process; open in https://ui.perfetto.dev) and
// lab07_timeline_<schedule>.svg, for naive, gpipe and 1f1b at P = world size
// (at most 4), m = 8, emulated compute.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/bench/bench.h"
#include "harness/bench/timeline.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"
#include "lab07/interleave.h"
#include "lab07/zero_bubble.h"

namespace {

namespace nn = dtl::nn;
namespace lab07 = dtl::lab07;
using dtl::bench::comm;

constexpr std::int64_t kBatch = 64;       // rows per step: m = 16 gives micro-batches of 4
constexpr std::int64_t kWidth = 1024;     // features of the emulated activations (256 KiB per batch)
constexpr int kUnitsPerStage = 1;        // one sleep per stage and pass: sleep_for's overshoot paid once
constexpr double kForwardPerUnit = 20e-3;  // emulated seconds per batch and unit; backward twice that
constexpr double kZeroBubbleScale = 5.0;   // the ZeroBubble rows sleep 5 times as long

// A layer that stands for compute: sleeps in proportion to its rows, passes x
// through. Optionally also stands for a link: sleeps alpha + bytes / B on each
// forward (the activation it received) and backward (the gradient it sends).
class SleepLayer final : public nn::Layer {
 public:
  SleepLayer(std::string name, double forward_per_batch, const dtl::LinkModel* link)
      : nn::Layer(std::move(name)), forward_(forward_per_batch), link_(link) {}
  std::string kind() const override { return "Sleep"; }
  const nn::Tensor& forward(const nn::Tensor& x) override {
    sleep(forward_ * fraction(x) + link_seconds(x));
    return x;
  }
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn&) override {
    sleep(2.0 * forward_ * fraction(dy) + link_seconds(dy));
    return dy;
  }
  // Split (Note [Split backward]): B and W each as long as the forward, so that
  // B then W takes what backward() takes.
  const nn::Tensor& backward_input(const nn::Tensor& dy) override {
    sleep(forward_ * fraction(dy) + link_seconds(dy));
    if (static_cast<std::size_t>(slot_) >= w_fraction_.size()) w_fraction_.resize(static_cast<std::size_t>(slot_) + 1);
    w_fraction_[static_cast<std::size_t>(slot_)] = fraction(dy);
    return dy;
  }
  void backward_weight(const nn::GradReadyFn&) override {
    sleep(forward_ * w_fraction_.at(static_cast<std::size_t>(slot_)));
  }
  nn::Shape output_shape(const nn::Shape& input) const override { return input; }
  void release_slot(int) override {}

 private:
  static double fraction(const nn::Tensor& t) { return static_cast<double>(t.shape()[0]) / kBatch; }
  double link_seconds(const nn::Tensor& t) const {
    return link_ == nullptr ? 0.0 : link_->alpha_seconds + static_cast<double>(t.bytes()) / link_->bytes_per_second;
  }
  // Sleeps in slices of 200 us and drives MPI's progress engine between them: a
  // GPU's copy engines move a message while its cores compute, but Open MPI moves
  // a message above the eager limit only while the sender is inside some MPI call
  // (See Note [Why a communication thread] in harness/comm/mpi_communicator.h).
  static void sleep(double seconds) {
    const double end = dtl::clock_seconds() + seconds;
    for (double left = seconds; left > 0; left = end - dtl::clock_seconds()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 200e-6)));
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    }
  }
  double forward_;
  const dtl::LinkModel* link_;
  std::vector<double> w_fraction_;  // per slot: the rows of the B whose W is due
};

const dtl::LinkModel& link_1gbe() {
  static const dtl::LinkModel link = dtl::link_by_name("1GbE");
  return link;
}

// P stages of kUnitsPerStage sleeping units; the first unit holds a real Linear
// (in 16 -> kWidth) and the last a real Linear (kWidth -> 10 classes), so the
// loss and the messages are real. With `chunks` v > 1: v P units each sleeping
// 1/v as long (the interleaved rows), so every rank still sleeps 20 + 40 ms per batch.
// `scale` multiplies every sleep (the ZeroBubble rows: 5).
nn::Model emulated_model(int stages, bool link, int chunks = 1, double scale = 1.0) {
  dtl::Rng rng(7);
  nn::Model model;
  const int units = stages * kUnitsPerStage * chunks;
  for (int u = 0; u < units; ++u) {
    std::vector<std::unique_ptr<nn::Layer>> layers;
    if (u == 0) layers.push_back(std::make_unique<nn::Linear>("in", 16, kWidth, nn::DType::kF32, rng));
    const bool receives = link && u % kUnitsPerStage == 0 && u > 0;
    layers.push_back(std::make_unique<SleepLayer>("sleep" + std::to_string(u), scale * kForwardPerUnit / chunks,
                                                  receives ? &link_1gbe() : nullptr));
    if (u == units - 1) layers.push_back(std::make_unique<nn::Linear>("out", kWidth, 10, nn::DType::kF32, rng));
    model.add_unit("u" + std::to_string(u), std::move(layers));
  }
  return model;
}

nn::Model real_model() { return nn::make_mlp(64, 512, 10, 8, 7); }

struct Batch {
  nn::Tensor x, y;
};
Batch make_batch(std::int64_t features) {
  Batch b{nn::Tensor::zeros({kBatch, features}, nn::DType::kF32, nn::MemoryCategory::kOther),
          nn::Tensor::zeros({kBatch}, nn::DType::kI32, nn::MemoryCategory::kOther)};
  for (std::int64_t i = 0; i < b.x.numel(); ++i) b.x.span<float>()[i] = static_cast<float>((i * 37) % 17) / 17.0f;
  for (std::int64_t r = 0; r < kBatch; ++r) b.y.span<std::int32_t>()[r] = static_cast<std::int32_t>(r % 10);
  return b;
}

enum class Schedule { kNaive, kGPipe, kOneFOneB };
const char* schedule_name(Schedule s) {
  return s == Schedule::kNaive ? "naive" : s == Schedule::kGPipe ? "gpipe" : "1f1b";
}

/// One pipeline of `stages` ranks: its stage, batch and schedule.
struct Pipeline {
  dtl::Comm sub;  // the first P ranks of the world, as the pipeline (empty on the others)
  std::unique_ptr<lab07::PipelineStage> stage;
  std::vector<lab07::Action> schedule;
  Batch batch;
  int stages = 1;

  Pipeline(const std::string& kind, int stages_, Schedule sched, int m, bool checkpoint = false,
           dtl::Timeline* timeline = nullptr)
      : sub(dtl::bench::first_ranks(stages_)), stages(stages_) {
    if (sub.get() == MPI_COMM_NULL) return;
    const int s = comm().rank();
    nn::Model whole = kind == "real" ? real_model() : emulated_model(stages, kind == "link");
    batch = make_batch(kind == "real" ? 64 : 16);
    // Emulated: kUnitsPerStage units each (balanced by construction). Real: the
    // harness's cut by parameter count (the MLP's hidden layers are equal).
    nn::Stage st;
    if (kind == "real") {
      st = whole.split_stages(stages, batch.x.shape())[static_cast<std::size_t>(s)];
    } else {
      const std::vector<nn::Shape> shapes = whole.activation_shapes(batch.x.shape());
      st.begin = s * kUnitsPerStage;
      st.end = (s + 1) * kUnitsPerStage;
      st.input_shape = shapes[static_cast<std::size_t>(st.begin)];
      st.output_shape = shapes[static_cast<std::size_t>(st.end)];
    }
    lab07::PipelineOptions options;
    options.micro_batches = m;
    options.checkpoint = checkpoint;
    options.timeline = timeline;
    stage = std::make_unique<lab07::PipelineStage>(sub, std::move(whole).slice(st.begin, st.end), st, options);
    schedule = sched == Schedule::kOneFOneB ? lab07::one_f_one_b_schedule(stages, s, m)
                                            : lab07::gpipe_schedule(stages, s, m);
  }
  bool member() const { return stage != nullptr; }
  void step() {
    if (member()) stage->train_step(batch.x, batch.y, schedule);
  }
  double busy() const {
    double b = 0.0;
    if (member()) {
      for (const lab07::Event& e : stage->events()) b += e.end_seconds - e.begin_seconds;
    }
    return b;
  }
};

double world_max(double v) {
  double out = 0.0;
  DTL_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm()));
  return out;
}
double world_sum(double v) {
  double out = 0.0;
  DTL_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm()));
  return out;
}
std::int64_t value_of_rank(std::int64_t v, int rank) {
  std::int64_t out = v;
  DTL_MPI_CHECK(MPI_Bcast(&out, 1, MPI_INT64_T, rank, comm()));
  return out;
}

void print_balance();
bool g_teaching_rows_ran = false;  // the balancing lines and the traces come with these rows only

void pipeline_row(benchmark::State& state, const std::string& kind, int stages, Schedule sched, int m,
                  bool checkpoint, bool graded = false) {
  if (!graded && !g_teaching_rows_ran) print_balance();
  g_teaching_rows_ran = g_teaching_rows_ran || !graded;
  Pipeline pipe(kind, stages, sched, m, checkpoint);
  pipe.step();  // warm-up
  std::vector<double> steps, bubbles;
  std::int64_t act0 = 0, act_last = 0;
  auto& tracker = nn::memory_tracker();
  for (auto _ : state) {
    const std::int64_t before = tracker.current(nn::MemoryCategory::kActivations);
    tracker.reset_peak();
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    const double t0 = dtl::clock_seconds();
    pipe.step();
    const double step = world_max(dtl::clock_seconds() - t0);
    const std::int64_t peak = tracker.peak(nn::MemoryCategory::kActivations) - before;
    act0 = value_of_rank(peak, 0);
    act_last = value_of_rank(peak, stages - 1);
    // bubble: 1 - busy/step per stage, averaged over the P stages
    const double idle = pipe.member() ? 1.0 - pipe.busy() / step : 0.0;
    bubbles.push_back(world_sum(idle) / stages);
    steps.push_back(step);
    state.SetIterationTime(step);
  }
  const double theory = lab07::bubble_fraction(stages, m);
  const double bubble = dtl::bench::median(bubbles);
  state.counters["step_ms"] = dtl::bench::median(steps) * 1e3;
  state.counters["bubble"] = 100.0 * bubble;
  state.counters["theory"] = 100.0 * theory;
  state.counters["ratio"] = theory > 0 ? bubble / theory : 0.0;
  state.counters["act0"] = static_cast<double>(act0) / 1024.0;
  state.counters["actL"] = static_cast<double>(act_last) / 1024.0;
}

// Interleaved/P<P>/v<v>/m<m>: the emulated pipeline cut into v P virtual stages (each
// sleeping 1/v of a stage's time), run by the given InterleavedStage with
// interleaved_schedule(); v = 1 is 1F1B through the same executor, so the pair of
// rows differs in the schedule only. bubble % = 1 - (the emulated work, 60 ms per
// batch per rank) / step; theory % = (P - 1)/(v m + P - 1); msgs/step = the
// point-to-point messages of one step over all ranks (2 (v P - 1) m).
// The most micro-batches a schedule holds from F to W (to B without W's).
int peak_stashed(const std::vector<lab07::Action>& schedule) {
  const bool split = std::any_of(schedule.begin(), schedule.end(),
                                 [](const lab07::Action& a) { return a.pass == lab07::Pass::kWeight; });
  int now = 0, peak = 0;
  for (const lab07::Action& a : schedule) {
    if (a.pass == lab07::Pass::kForward) ++now;
    if (a.pass == (split ? lab07::Pass::kWeight : lab07::Pass::kBackward)) --now;
    peak = std::max(peak, now);
  }
  return peak;
}

// The ZeroBubble rows run through the same function, one chunk, kZeroBubbleScale:
// kZbBaseline is 1F1B (interleaved_schedule(P, s, m, 1)), kZbH1 zb_h1_schedule().
enum class RowOrder { kInterleaved, kZbBaseline, kZbH1 };

// `scale`: every sleep times this (0: 1 for the Interleaved rows, kZeroBubbleScale for the ZeroBubble rows).
void interleaved_row(benchmark::State& state, int stages, int chunks, int m, RowOrder order = RowOrder::kInterleaved,
                     double scale = 0.0) {
  const bool zero_bubble = order == RowOrder::kZbH1;
  if (scale == 0.0) scale = order == RowOrder::kInterleaved ? 1.0 : kZeroBubbleScale;
  dtl::Comm sub = dtl::bench::first_ranks(stages);
  std::unique_ptr<lab07::InterleavedStage> stage;
  std::vector<lab07::Action> schedule;
  const Batch batch = make_batch(16);
  if (sub.get() != MPI_COMM_NULL) {
    const int s = comm().rank();
    const std::vector<nn::Shape> shapes =
        emulated_model(stages, false, chunks, scale).activation_shapes(batch.x.shape());
    std::vector<nn::Model> models;
    std::vector<nn::Stage> infos;
    for (int c = 0; c < chunks; ++c) {
      nn::Stage st;
      st.begin = (c * stages + s) * kUnitsPerStage;
      st.end = st.begin + kUnitsPerStage;
      st.input_shape = shapes[static_cast<std::size_t>(st.begin)];
      st.output_shape = shapes[static_cast<std::size_t>(st.end)];
      models.push_back(emulated_model(stages, false, chunks, scale).slice(st.begin, st.end));
      infos.push_back(st);
    }
    stage = std::make_unique<lab07::InterleavedStage>(sub, std::move(models), infos, m);
    schedule = zero_bubble ? lab07::zb_h1_schedule(stages, s, m) : lab07::interleaved_schedule(stages, s, m, chunks);
  }
  auto step = [&] {
    if (stage) stage->train_step(batch.x, batch.y, schedule);
  };
  step();  // warm-up
  std::vector<double> steps;
  double messages = 0.0;
  std::int64_t act0 = 0, act_last = 0;
  auto& tracker = nn::memory_tracker();
  for (auto _ : state) {
    const std::int64_t before = tracker.current(nn::MemoryCategory::kActivations);
    tracker.reset_peak();
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    const double t0 = dtl::clock_seconds();
    step();
    const double t = world_max(dtl::clock_seconds() - t0);
    messages = world_sum(stage ? static_cast<double>(stage->messages_sent()) : 0.0);
    const std::int64_t peak = tracker.peak(nn::MemoryCategory::kActivations) - before;
    act0 = value_of_rank(peak, 0);
    act_last = value_of_rank(peak, stages - 1);
    steps.push_back(t);
    state.SetIterationTime(t);
  }
  const double work = 3.0 * kUnitsPerStage * kForwardPerUnit * scale;  // forward + backward per batch, per rank
  const double median = dtl::bench::median(steps);
  // ZB-H1 (Note [Zero bubble]): (P - 1) t idle against 3 m t of work, t_F = t_B = t_W = t.
  const double theory = zero_bubble ? static_cast<double>(stages - 1) / static_cast<double>(3 * m + stages - 1)
                                    : static_cast<double>(stages - 1) / static_cast<double>(chunks * m + stages - 1);
  if (order != RowOrder::kInterleaved) {
    state.counters["stash"] = world_max(stage ? static_cast<double>(peak_stashed(schedule)) : 0.0);
    state.counters["act0"] = static_cast<double>(act0) / 1024.0;
    state.counters["actL"] = static_cast<double>(act_last) / 1024.0;
  }
  state.counters["step_ms"] = median * 1e3;
  state.counters["bubble"] = 100.0 * (1.0 - work / median);
  state.counters["theory"] = 100.0 * theory;
  state.counters["ratio"] = theory > 0 ? (1.0 - work / median) / theory : 0.0;
  state.counters["msgs"] = messages;
}

void add(const std::string& name, std::function<void(benchmark::State&)> fn, int iterations) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
      ->Iterations(iterations)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// Balancing: the cut by parameter count against the cut by measured time, on a small GPT.
void print_balance() {
  if (comm().rank() != 0) return;
  nn::Model gpt = nn::make_gpt(65, 64, 128, 4, 4, 3);
  nn::Tensor x = nn::Tensor::zeros({8, 64}, nn::DType::kI32, nn::MemoryCategory::kOther);
  nn::Tensor y = nn::Tensor::zeros({8, 64}, nn::DType::kI32, nn::MemoryCategory::kOther);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 65);
    y.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 11) % 65);
  }
  lab07::measure_unit_costs(gpt, x, y, 2);  // warm-up
  const std::vector<double> costs = lab07::measure_unit_costs(gpt, x, y, 7);
  std::printf("# balancing a GPT (V 65, T 64, C 128, 4 blocks; batch 8): measured forward+backward per unit (ms):");
  for (double c : costs) std::printf(" %.2f", c * 1e3);
  std::printf("\n");
  for (int P : {2, 3}) {
    std::vector<int> by_params{0};
    for (const nn::Stage& st : gpt.split_stages(P, x.shape())) by_params.push_back(st.end);
    const std::vector<int> by_time = lab07::balance_stages(costs, P);
    auto show = [](const std::vector<int>& b) {
      std::string out;
      for (int v : b) out += (out.empty() ? "" : ",") + std::to_string(v);
      return "{" + out + "}";
    };
    std::printf("#   P = %d: cut by parameters %s imbalance %.2f; cut by time %s imbalance %.2f\n", P,
                show(by_params).c_str(), lab07::stage_imbalance(costs, by_params), show(by_time).c_str(),
                lab07::stage_imbalance(costs, by_time));
  }
}

void register_rows() {
  const int world = comm().size();
  const bool quick = dtl::bench::quick();
  if (world >= 2) {
    add(
        "Grade/P2/1f1b/m8",
        [](benchmark::State& s) { pipeline_row(s, "emulated", 2, Schedule::kOneFOneB, 8, false, true); },
        quick ? 3 : 9);
  }
  std::vector<int> stage_counts;
  for (int P : {2, 3, 4}) {
    if (P <= world && (!quick || P == std::min(world, 4))) stage_counts.push_back(P);
  }
  const std::vector<int> ms = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4, 8, 16};
  const int iterations = quick ? 3 : 7;
  if (comm().rank() == 0) {
    std::printf("# %d ranks; emulated compute: %d sleeping units per stage, forward %.0f ms + backward %.0f ms per "
                "stage and batch of %lld rows; emulated link: %s\n",
                world, kUnitsPerStage, kUnitsPerStage * kForwardPerUnit * 1e3,
                2 * kUnitsPerStage * kForwardPerUnit * 1e3, static_cast<long long>(kBatch),
                link_1gbe().describe().c_str());
    if (world < 4) std::printf("# P = 3 and 4 need more ranks: ./dtl bench 07 -n 4\n");
  }
  for (const std::string kind : {"emulated", "link"}) {
    if (kind == "link" && quick) continue;
    for (int P : stage_counts) {
      if (kind == "link" && P != stage_counts.back()) continue;
      const std::string prefix = std::string(kind == "emulated" ? "Emulated" : "Link1GbE") + "/P" + std::to_string(P);
      add(prefix + "/naive/m1", [kind, P](benchmark::State& s) { pipeline_row(s, kind, P, Schedule::kNaive, 1, false); },
          iterations);
      for (Schedule sched : {Schedule::kGPipe, Schedule::kOneFOneB}) {
        for (int m : ms) {
          if (m == 1 && kind == "link") continue;
          add(prefix + "/" + schedule_name(sched) + "/m" + std::to_string(m),
              [kind, P, sched, m](benchmark::State& s) { pipeline_row(s, kind, P, sched, m, false); }, iterations);
        }
      }
    }
  }
  // Interleaved 1F1B (v = 2) against 1F1B (v = 1) through the same executor, emulated compute.
  for (int P : stage_counts) {
    for (int m : quick ? std::vector<int>{2 * P} : std::vector<int>{P, 2 * P, 4 * P}) {
      for (int v : {1, 2}) {
        add("Interleaved/P" + std::to_string(P) + "/v" + std::to_string(v) + "/m" + std::to_string(m),
            [P, v, m](benchmark::State& s) { interleaved_row(s, P, v, m); }, iterations);
      }
    }
    // The same at m = 2P with every sleep kZeroBubbleScale times as long, as the ZeroBubble
    // rows: each op's fixed cost (a wake-up, a message) weighs 5 times less against its work.
    if (!quick) {
      for (int v : {1, 2}) {
        add("Interleaved/P" + std::to_string(P) + "/v" + std::to_string(v) + "/m" + std::to_string(2 * P) + "/x5",
            [P, v](benchmark::State& s) {
              interleaved_row(s, P, v, 2 * P, RowOrder::kInterleaved, kZeroBubbleScale);
            },
            iterations);
      }
    }
  }
  // ZB-H1 against 1F1B through the same executor (one chunk), emulated compute, t_F = t_B = t_W.
  for (int P : stage_counts) {
    for (int m : quick ? std::vector<int>{8} : std::vector<int>{4, 8, 16}) {
      for (const bool zb : {false, true}) {
        add("ZeroBubble/P" + std::to_string(P) + (zb ? "/zbh1" : "/1f1b") + "/m" + std::to_string(m),
            [P, m, zb](benchmark::State& s) {
              interleaved_row(s, P, 1, m, zb ? RowOrder::kZbH1 : RowOrder::kZbBaseline);
            },
            iterations);
      }
    }
  }
  // Real compute on 2 ranks (2 cores): time, and activation memory with and without checkpointing.
  if (world >= 2) {
    for (Schedule sched : {Schedule::kGPipe, Schedule::kOneFOneB}) {
      for (int m : quick ? std::vector<int>{4} : std::vector<int>{1, 4, 16}) {
        add(std::string("Real/P2/") + schedule_name(sched) + "/m" + std::to_string(m),
            [sched, m](benchmark::State& s) { pipeline_row(s, "real", 2, sched, m, false); }, iterations);
      }
      if (!quick) {
        add(std::string("Real/P2/") + schedule_name(sched) + "+ckpt/m16",
            [sched](benchmark::State& s) { pipeline_row(s, "real", 2, sched, 16, true); }, iterations);
      }
    }
  }
}

// One step per schedule on the emulated pipeline, recorded: a Chrome trace and an SVG picture.
void write_svg(const std::string& path, const std::vector<double>& all, int stages, int m, const char* title) {
  // all: per event (stage, pass, micro_batch, begin, end)
  double t0 = 1e300, t1 = 0.0;
  for (std::size_t k = 0; k + 4 < all.size() + 1; k += 5) {
    t0 = std::min(t0, all[k + 3]);
    t1 = std::max(t1, all[k + 4]);
  }
  const double width = 1000.0, row = 40.0, left = 70.0, top = 30.0;
  const double scale = (width - left - 10.0) / std::max(t1 - t0, 1e-9);
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << top + row * stages + 30
      << "' font-family='sans-serif' font-size='11'>\n";
  out << "<text x='" << left << "' y='18' font-size='13'>" << title << " (P = " << stages << ", m = " << m
      << "; F light, B dark, one colour per micro-batch; blank = bubble)</text>\n";
  for (int s = 0; s < stages; ++s) {
    out << "<text x='5' y='" << top + row * s + 25 << "'>stage " << s << "</text>\n";
  }
  for (std::size_t k = 0; k + 4 < all.size() + 1; k += 5) {
    const int s = static_cast<int>(all[k]);
    const bool forward = all[k + 1] == 0.0;
    const int i = static_cast<int>(all[k + 2]);
    const double x = left + (all[k + 3] - t0) * scale, w = std::max(1.0, (all[k + 4] - all[k + 3]) * scale);
    const int hue = (i * 360) / std::max(m, 1);
    out << "<rect x='" << x << "' y='" << top + row * s + 4 << "' width='" << w << "' height='" << row - 8
        << "' fill='hsl(" << hue << "," << (forward ? "70%,75%" : "70%,40%") << ")' stroke='black' stroke-width='0.5'/>\n";
    if (w > 16) {
      out << "<text x='" << x + 3 << "' y='" << top + row * s + 25 << "' fill='" << (forward ? "black" : "white")
          << "'>" << (forward ? "F" : "B") << i << "</text>\n";
    }
  }
  out << "<text x='" << left << "' y='" << top + row * stages + 20 << "'>time: " << (t1 - t0) * 1e3
      << " ms</text>\n</svg>\n";
}

void write_traces() {
  if (!g_teaching_rows_ran) return;
  const char* dir = std::getenv("DTL_TRACE_OUT");
  const std::string folder = dir != nullptr && *dir != '\0' ? dir : ".";
  const int stages = std::min(comm().size(), 4);
  if (stages < 2) return;
  const int m = 8;
  for (Schedule sched : {Schedule::kNaive, Schedule::kGPipe, Schedule::kOneFOneB}) {
    const int mm = sched == Schedule::kNaive ? 1 : m;
    dtl::Timeline timeline(comm().rank(), "stage " + std::to_string(comm().rank()));
    Pipeline pipe("emulated", stages, sched, mm, false, &timeline);
    pipe.step();
    timeline.clear();
    DTL_MPI_CHECK(MPI_Barrier(comm()));
    pipe.step();
    const std::string name = schedule_name(sched);
    timeline.write_gathered(comm(), folder + "/lab07_trace_" + name + ".json");
    // The picture: gather (stage, pass, micro-batch, begin, end) of every event to rank 0.
    std::vector<double> mine;
    if (pipe.member()) {
      for (const lab07::Event& e : pipe.stage->events()) {
        mine.insert(mine.end(), {static_cast<double>(comm().rank()), e.pass == lab07::Pass::kForward ? 0.0 : 1.0,
                                 static_cast<double>(e.micro_batch), e.begin_seconds, e.end_seconds});
      }
    }
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(comm().size())), offsets(counts.size());
    DTL_MPI_CHECK(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm()));
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = total;
      total += counts[r];
    }
    std::vector<double> all(static_cast<std::size_t>(std::max(total, 1)));
    DTL_MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE,
                              0, comm()));
    if (comm().rank() == 0) {
      all.resize(static_cast<std::size_t>(total));
      const std::string svg = folder + "/lab07_timeline_" + name + ".svg";
      write_svg(svg, all, stages, mm, name.c_str());
      std::printf("# %s, P = %d, m = %d, emulated compute: trace %s/lab07_trace_%s.json, picture %s\n", name.c_str(),
                  stages, mm, folder.c_str(), name.c_str(), svg.c_str());
    }
  }
}

const bool registered = [] {
  dtl::bench::set_columns({{"step_ms", "step (ms)", "%10.2f"},
                           {"bubble", "bubble %", "%9.1f"},
                           {"theory", "theory %", "%9.1f"},
                           {"ratio", "ratio", "%6.2f"},
                           {"act0", "act0 (KiB)", "%10.0f"},
                           {"actL", "actL (KiB)", "%10.0f"},
                           {"msgs", "msgs/step", "%9.0f"},
                           {"stash", "stash", "%6.0f"}});
  dtl::bench::at_start(register_rows);
  dtl::bench::at_finish(write_traces);
  return true;
}();

}  // namespace
