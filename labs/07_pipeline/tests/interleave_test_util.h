// What lab 07's interleaving tests share (task F): the test's own model of an
// interleaved pipeline, written from Note [Interleaving]'s definitions only
// (virtual stage k = c P + s; F of k needs F of k - 1, B of k needs F of k and
// B of k + 1), never from interleaved_schedule():
//
//   - check_order(): each (micro-batch, chunk) once as F and once as B, F first;
//     each chunk's forwards in micro-batch order, and its backwards too;
//   - simulate(): a discrete-event run of every rank's order at once, each op
//     starting as soon as its rank is free and its inputs are done (messages
//     free), with t_f per chunk forward and t_b per chunk backward. It reports a
//     deadlock (no rank can start its next op) with each rank's blocked op, else
//     the makespan and each rank's busy time;
//   - run_interleaved(): the chunks of this rank (the test's even cut of the
//     model into v P virtual stages) trained by InterleavedStage.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "lab07/interleave.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {

/// "F0[1] B0[1]": every action with its chunk (the test's own text).
inline std::string chunk_text(const std::vector<Action>& schedule) {
  std::string out;
  for (const Action& a : schedule) {
    out += (out.empty() ? "" : " ") + std::string(1, static_cast<char>(a.pass)) + std::to_string(a.micro_batch) +
           "[" + std::to_string(a.chunk) + "]";
  }
  return out;
}

/// Empty if `schedule` is a valid order of v chunks and m micro-batches, else why not.
inline std::string check_order(const std::vector<Action>& schedule, int v, int m) {
  std::vector<int> next_f(static_cast<std::size_t>(v), 0), next_b(static_cast<std::size_t>(v), 0);
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const Action& a = schedule[k];
    const std::string at = "action " + std::to_string(k) + " (" + chunk_text({a}) + ")";
    if (a.chunk < 0 || a.chunk >= v || a.micro_batch < 0 || a.micro_batch >= m) return at + " is out of range";
    int& next = (a.pass == Pass::kForward ? next_f : next_b)[static_cast<std::size_t>(a.chunk)];
    if (a.micro_batch != next) return at + ": chunk " + std::to_string(a.chunk) + " expected micro-batch " +
                                      std::to_string(next) + " next (in order, each once)";
    if (a.pass == Pass::kBackward && next_f[static_cast<std::size_t>(a.chunk)] <= a.micro_batch) {
      return at + " comes before its forward";
    }
    ++next;
  }
  for (int c = 0; c < v; ++c) {
    if (next_b[static_cast<std::size_t>(c)] != m) return "chunk " + std::to_string(c) + " misses backwards";
  }
  return "";
}

/// The most (micro-batch, chunk) pairs between their F and their B at once.
inline int peak_pairs_in_flight(const std::vector<Action>& schedule) {
  int now = 0, peak = 0;
  for (const Action& a : schedule) {
    now += a.pass == Pass::kForward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

struct Simulation {
  std::string deadlock;      // empty, or each rank's blocked op
  double makespan = 0.0;     // when the last op ends
  std::vector<double> busy;  // per rank: time spent in ops
};

/// Runs every rank's order at once (orders[s] is rank s's), ops as early as their
/// rank and inputs allow. Assumes check_order() passed on each.
inline Simulation simulate(const std::vector<std::vector<Action>>& orders, int v, int m, double t_f, double t_b) {
  const int P = static_cast<int>(orders.size()), V = v * P;
  // done_f[k][i], done_b[k][i]: when F / B of micro-batch i on virtual stage k ended (-1: not yet).
  std::vector<std::vector<double>> done_f(static_cast<std::size_t>(V), std::vector<double>(m, -1.0)), done_b = done_f;
  std::vector<std::size_t> pos(static_cast<std::size_t>(P), 0);
  Simulation sim;
  sim.busy.assign(static_cast<std::size_t>(P), 0.0);
  std::vector<double> clock(static_cast<std::size_t>(P), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      const std::vector<Action>& order = orders[static_cast<std::size_t>(s)];
      std::size_t& p = pos[static_cast<std::size_t>(s)];
      for (; p < order.size(); ++p) {
        const Action& a = order[p];
        const auto k = static_cast<std::size_t>(a.chunk * P + s);
        const auto i = static_cast<std::size_t>(a.micro_batch);
        double ready = 0.0;  // when its input is there
        if (a.pass == Pass::kForward) {
          if (k > 0 && done_f[k - 1][i] < 0) break;
          if (k > 0) ready = done_f[k - 1][i];
        } else {
          if (done_f[k][i] < 0) break;
          ready = done_f[k][i];
          if (k + 1 < static_cast<std::size_t>(V)) {
            if (done_b[k + 1][i] < 0) break;
            ready = std::max(ready, done_b[k + 1][i]);
          }
        }
        const double cost = a.pass == Pass::kForward ? t_f : t_b;
        double& now = clock[static_cast<std::size_t>(s)];
        now = std::max(now, ready) + cost;
        (a.pass == Pass::kForward ? done_f : done_b)[k][i] = now;
        sim.busy[static_cast<std::size_t>(s)] += cost;
        sim.makespan = std::max(sim.makespan, now);
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s) {
    const std::vector<Action>& order = orders[static_cast<std::size_t>(s)];
    const std::size_t p = pos[static_cast<std::size_t>(s)];
    if (p < order.size()) {
      sim.deadlock += "rank " + std::to_string(s) + " waits at action " + std::to_string(p) + " (" +
                      chunk_text({order[p]}) + "); ";
    }
  }
  return sim;
}

/// This rank's chunks of `kind` (the test's even cut into v P virtual stages, chunk c
/// = virtual stage c P + rank), trained `steps` SGD steps by InterleavedStage.
struct InterleavedRun {
  std::vector<std::vector<float>> values;  // per chunk, afterwards
  std::vector<std::pair<int, int>> units;  // per chunk: [begin, end)
  std::vector<double> losses;              // per step, on rank P - 1 (0 elsewhere)
  std::int64_t messages = 0;               // sent by this rank in the last step
};

inline InterleavedRun run_interleaved(ModelKind kind, int v, int m, int steps, std::int64_t global, int units,
                                      std::uint64_t seed = 3, std::int64_t width = 16) {
  const int P = comm().size(), s = comm().rank();
  const std::vector<int> bounds = even_cut(units, v * P);
  std::vector<nn::Model> chunks;
  std::vector<nn::Stage> stages;
  InterleavedRun run;
  for (int c = 0; c < v; ++c) {
    nn::Model whole = make_model(kind, seed, units, width);  // the same seed: the same weights
    const nn::Stage st = stage_of(whole, bounds, c * P + s, input_shape(kind, global));
    chunks.push_back(std::move(whole).slice(st.begin, st.end));
    stages.push_back(st);
    run.units.emplace_back(st.begin, st.end);
  }
  std::vector<nn::Tensor> values, grads;
  std::vector<nn::Sgd> sgds;
  for (nn::Model& model : chunks) {
    values.push_back(model.flatten_values());
    grads.push_back(model.flatten_grads());
    sgds.emplace_back(kSgd, values.back().numel());
  }
  lab07::InterleavedStage pipe(comm(), std::move(chunks), stages, m);
  const std::vector<Action> schedule = lab07::interleaved_schedule(P, s, m, v);
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, global, 0, global);
    run.losses.push_back(pipe.train_step(b.x, b.y, schedule));
    for (int c = 0; c < v; ++c) {
      const auto k = static_cast<std::size_t>(c);
      sgds[k].step(values[k].span<float>(), grads[k].span<float>());
    }
  }
  for (int c = 0; c < v; ++c) run.values.push_back(values_of(pipe.model(c)));
  run.messages = pipe.messages_sent();
  return run;
}

}  // namespace lab07_test
