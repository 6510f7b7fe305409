// Lab 08 benchmark, tasks F and F2: the row-parallel allreduce (and, with sequence
// parallelism, reduce-scatter) overlapped with its GEMM.
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
// Rows OverlapSP/<link>/T<T>/k<k> (task F2; See Note [Overlapping the
// sequence-parallel reduce-scatter]): the same projection with sequence
// parallelism, (B = 8, S = 32, 512/T) -> this rank's (8, 32/T, 128), the plain
// RowParallelLinear (one reduce-scatter) against the overlapped layer with k
// chunks of each rank's 256/T rows; the same columns, the bound with the
// reduce-scatter's time.
//
// Rows in the order tensor_parallel_bench.cc registers them: after the GPT rows.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_gpt.h"
#include "lab08/overlapped_linear.h"

namespace lab08_bench {
namespace {

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

  OverlapPair(int T, const std::string& link, int chunks, bool sequence_parallel = false)
      : sub(dtl::bench::first_ranks(T)) {
    if (sub.get() == MPI_COMM_NULL) return;
    // Under the emulator, Open MPI with a sleeping progress thread: a communication
    // thread would spin in each blocking collective and slow the GEMMs it should hide
    // behind (See Note [The graded row]).
    backend = dtl::make_backend(backend_of(link), sub, {}, "mpi-polling", "mpi-polling, emulated:LINK");
    clock = std::make_unique<OverlapClock>(*backend, dtl::link_by_name(link));
    dtl::Rng rng(11);
    nn::Linear full("proj", kIn, kOut, nn::DType::kF32, rng, 0.02, true);
    plain = std::make_unique<lab08::RowParallelLinear>(full, *clock,
                                                       lab08::ParallelOptions{.sequence_parallel = sequence_parallel});
    overlapped = lab08::make_overlapped(*plain, *clock, chunks, sequence_parallel);
    // With sequence parallelism the rows are (B, S): the reduce-scatter hands each rank S/T of every sequence.
    const nn::Shape shape = sequence_parallel ? nn::Shape{kBatch, kContext, kIn / T} : nn::Shape{kRows, kIn / T};
    x = nn::Tensor::zeros(shape, nn::DType::kF32, nn::MemoryCategory::kOther);
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

// The closed form's hidden share on `link`: all but the last chunk's collective hidden.
// Task F chunks the N rows of one allreduce; task F2 the N/T rows each rank receives,
// each chunk a reduce-scatter of T such blocks.
double hidden_bound(const std::string& link, int T, int chunks, bool sequence_parallel) {
  const dtl::LinkModel model = dtl::link_by_name(link);
  const std::int64_t rows = sequence_parallel ? OverlapPair::kRows / T : OverlapPair::kRows;
  const std::int64_t k = std::min<std::int64_t>(chunks, rows), last_rows = rows - (k - 1) * rows / k;
  const auto row_bytes = static_cast<std::size_t>(OverlapPair::kOut * 4 * (sequence_parallel ? T : 1));
  const auto kind = sequence_parallel ? dtl::CollectiveKind::kReduceScatter : dtl::CollectiveKind::kAllreduce;
  const double whole = dtl::model_seconds(model, kind, rows * row_bytes, T);
  const double last = dtl::model_seconds(model, kind, last_rows * row_bytes, T);
  return 1.0 - last / whole;
}

void overlap_row(benchmark::State& state, int T, const std::string& link, int chunks, bool sequence_parallel) {
  OverlapPair pair(T, link, chunks, sequence_parallel);
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
  state.counters["bound"] = 100.0 * hidden_bound(link, T, chunks, sequence_parallel);
  state.counters["wall_hidden"] = share(dtl::bench::median(waited), dtl::bench::median(plain_waited));
  state.counters["diff"] = diff;
}

}  // namespace

void register_overlap_rows(const std::vector<int>& sizes, bool quick) {
  // 1GbE: a link the GEMM cannot cover (a chunk's allreduce outlasts a chunk's GEMM),
  // where the measured share falls below the closed form's bound.
  for (const std::string link : {"NVLink4", "10GbE", "1GbE"}) {
    for (int T : sizes) {
      if (T == 1) continue;
      for (int k : {2, 4, 8}) {
        if ((quick && k != 4) || (link == "1GbE" && (quick || k != 4))) continue;
        add("Overlap/" + link + "/T" + std::to_string(T) + "/k" + std::to_string(k),
            [T, link, k](benchmark::State& s) { overlap_row(s, T, link, k, false); }, quick ? 5 : 41);
      }
    }
  }
  // Task F2: the sequence-parallel exit, on the two links of the goal (T divides S = 32).
  for (const std::string link : {"NVLink4", "10GbE"}) {
    for (int T : sizes) {
      if (T == 1 || OverlapPair::kRows % (kBatch * T) != 0 || kContext % T != 0) continue;
      for (int k : {2, 4, 8}) {
        if (quick && k != 4) continue;
        add("OverlapSP/" + link + "/T" + std::to_string(T) + "/k" + std::to_string(k),
            [T, link, k](benchmark::State& s) { overlap_row(s, T, link, k, true); }, quick ? 5 : 41);
      }
    }
  }
}

}  // namespace lab08_bench
