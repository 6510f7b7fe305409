// The test's own model of a pipeline schedule (tasks B and F), written from the
// definitions of Note [The bubble], Note [GPipe and 1F1B] and Note [Interleaving]
// only, never from the schedules under test:
//
//   - check_order(): each (micro-batch, chunk) once as F and once as B, F first;
//     each chunk's forwards in micro-batch order, and its backwards too;
//   - peak_in_flight(): the most micro-batches (pairs, with chunks) between their
//     F and their B at once: the activation memory of a schedule;
//   - simulate(): a discrete-event run of every rank's order at once, each op
//     starting as soon as its rank is free and its inputs are done (messages
//     free), with t_f per (chunk) forward and t_b per (chunk) backward. It reports
//     a deadlock (no rank can start its next op) with each rank's blocked op, else
//     the makespan and each rank's busy time;
//   - with W actions (task G, Note [Zero bubble]): check_order() takes each W once
//     after its B, in order, on every pair or none; simulate() runs a W of t_w
//     after its own B (nobody waits for it); peak_stashed() counts micro-batches
//     from F to W; greedy_w_makespan() is the oracle of ZB-H1's step: the given
//     1F1B orders with each stage running a W it owes whenever its next F or B
//     cannot start, or before an F that would exceed a cap, event by event;
//   - leanest_caps(): 1F1B's in-flight count on each stage, found by a search
//     with simulate() from what 1F1B achieves, not written down (the count is
//     what task B derives): one_f_one_b_order() in pipeline_test_util.h is the
//     greedy order under these caps.
//
// Virtual stage k = c P + s runs chunk c on rank s; F of k needs F of k - 1, and B
// of k needs F of k and B of k + 1. Without interleaving every chunk is 0 and the
// virtual stages are the stages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "lab07/pipeline.h"

namespace lab07_test {

using dtl::lab07::Action;
using dtl::lab07::Pass;

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
/// W actions (task G) are optional: none at all, or each pair once, after its B, in order.
inline std::string check_order(const std::vector<Action>& schedule, int v, int m) {
  std::vector<int> next_f(static_cast<std::size_t>(v), 0), next_b = next_f, next_w = next_f;
  bool any_w = false;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const Action& a = schedule[k];
    const std::string at = "action " + std::to_string(k) + " (" + chunk_text({a}) + ")";
    if (a.chunk < 0 || a.chunk >= v || a.micro_batch < 0 || a.micro_batch >= m) return at + " is out of range";
    const auto c = static_cast<std::size_t>(a.chunk);
    int& next = (a.pass == Pass::kForward ? next_f : a.pass == Pass::kBackward ? next_b : next_w)[c];
    if (a.micro_batch != next) return at + ": chunk " + std::to_string(a.chunk) + " expected micro-batch " +
                                      std::to_string(next) + " next (in order, each once)";
    if (a.pass == Pass::kBackward && next_f[c] <= a.micro_batch) return at + " comes before its forward";
    if (a.pass == Pass::kWeight && next_b[c] <= a.micro_batch) return at + " comes before its B";
    any_w = any_w || a.pass == Pass::kWeight;
    ++next;
  }
  for (int c = 0; c < v; ++c) {
    if (next_b[static_cast<std::size_t>(c)] != m) return "chunk " + std::to_string(c) + " misses backwards";
    if (any_w && next_w[static_cast<std::size_t>(c)] != m) return "chunk " + std::to_string(c) + " misses W's";
  }
  return "";
}

/// The schedule without its W actions.
inline std::vector<Action> without_w(const std::vector<Action>& schedule) {
  std::vector<Action> out;
  for (const Action& a : schedule) {
    if (a.pass != Pass::kWeight) out.push_back(a);
  }
  return out;
}

/// The most micro-batches (pairs) from their F to their W at once (to their B without W's):
/// the stashes a stage keeps, counting a micro-batch whole until its W.
inline int peak_stashed(const std::vector<Action>& schedule) {
  const bool split = std::any_of(schedule.begin(), schedule.end(), [](const Action& a) { return a.pass == Pass::kWeight; });
  int now = 0, peak = 0;
  for (const Action& a : schedule) {
    if (a.pass == Pass::kForward) ++now;
    if (a.pass == (split ? Pass::kWeight : Pass::kBackward)) --now;
    peak = std::max(peak, now);
  }
  return peak;
}

/// The most micro-batches (with chunks: (micro-batch, chunk) pairs) between their F and their B at once.
inline int peak_in_flight(const std::vector<Action>& schedule) {
  int now = 0, peak = 0;
  for (const Action& a : schedule) {
    if (a.pass == Pass::kWeight) continue;
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

/// Runs every rank's order at once (orders[s] is rank s's, with v chunks each), ops as
/// early as their rank and inputs allow; a W (t_w) needs only its own B. Assumes
/// check_order() passed on each.
inline Simulation simulate(const std::vector<std::vector<Action>>& orders, int v, int m, double t_f, double t_b,
                           double t_w = 0.0) {
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
        if (a.pass == Pass::kWeight) {
          if (done_b[k][i] < 0) break;
        } else if (a.pass == Pass::kForward) {
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
        const double cost = a.pass == Pass::kForward ? t_f : a.pass == Pass::kBackward ? t_b : t_w;
        double& now = clock[static_cast<std::size_t>(s)];
        now = std::max(now, ready) + cost;
        if (a.pass != Pass::kWeight) (a.pass == Pass::kForward ? done_f : done_b)[k][i] = now;
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

/// The oracle of task G: the makespan of the given F/B orders (one chunk; fb_orders[s]
/// is stage s's, no W), each stage owing a W (t_w) after each of its B's. Event by
/// event, the stage whose next op can start earliest runs it: at its clock, a W it owes
/// if its next F would hold more than `cap` micro-batches between F and W, else its
/// next F or B if its input is there, else a W it owes, else it waits for the input.
/// Its W's left at the end run then. -1 if the orders wait in a cycle.
inline double greedy_w_makespan(const std::vector<std::vector<Action>>& fb_orders, int m, double t_f, double t_b,
                                double t_w, int cap) {
  const int P = static_cast<int>(fb_orders.size());
  std::vector<std::vector<double>> done_f(static_cast<std::size_t>(P), std::vector<double>(m, -1.0)), done_b = done_f;
  std::vector<std::size_t> pos(static_cast<std::size_t>(P), 0);
  std::vector<int> owed(static_cast<std::size_t>(P), 0), held(static_cast<std::size_t>(P), 0);
  std::vector<double> clock(static_cast<std::size_t>(P), 0.0);
  double makespan = 0.0;
  for (;;) {
    int best = -1;
    bool best_w = false;
    double best_start = 0.0;
    for (int s = 0; s < P; ++s) {
      const auto us = static_cast<std::size_t>(s);
      const std::vector<Action>& order = fb_orders[us];
      const bool more = pos[us] < order.size();
      if (!more && owed[us] == 0) continue;
      double ready = -1.0;  // when the next F or B can start; -1: its input is not computed yet
      bool f_over_cap = false;
      if (more) {
        const Action& a = order[pos[us]];
        const auto i = static_cast<std::size_t>(a.micro_batch);
        if (a.pass == Pass::kForward) {
          ready = s == 0 ? 0.0 : done_f[us - 1][i];
          f_over_cap = held[us] >= cap;
        } else if (done_f[us][i] >= 0 && (s == P - 1 || done_b[us + 1][i] >= 0)) {
          ready = std::max(done_f[us][i], s == P - 1 ? 0.0 : done_b[us + 1][i]);
        }
      }
      bool w = false;
      double start = 0.0;
      if (owed[us] > 0 && (!more || f_over_cap || ready < 0 || ready > clock[us])) {
        w = true;
        start = clock[us];
      } else if (ready >= 0) {
        start = std::max(ready, clock[us]);
      } else {
        continue;  // waits for an input not computed yet, and owes no W
      }
      if (best < 0 || start < best_start) {
        best = s;
        best_w = w;
        best_start = start;
      }
    }
    if (best < 0) break;
    const auto ub = static_cast<std::size_t>(best);
    if (best_w) {
      --owed[ub];
      --held[ub];
      clock[ub] = best_start + t_w;
    } else {
      const Action& a = fb_orders[ub][pos[ub]++];
      const auto i = static_cast<std::size_t>(a.micro_batch);
      if (a.pass == Pass::kForward) {
        ++held[ub];
        clock[ub] = best_start + t_f;
        done_f[ub][i] = clock[ub];
      } else {
        ++owed[ub];
        clock[ub] = best_start + t_b;
        done_b[ub][i] = clock[ub];
      }
    }
    makespan = std::max(makespan, clock[ub]);
  }
  for (int s = 0; s < P; ++s) {
    if (pos[static_cast<std::size_t>(s)] < fb_orders[static_cast<std::size_t>(s)].size()) return -1.0;
  }
  return makespan;
}

/// One stage's order by the greedy rule: a forward while fewer than `cap` micro-batches
/// are in flight and forwards remain, else a backward (chunk 0). cap = m gives GPipe.
inline std::vector<Action> greedy_order(int m, int cap) {
  std::vector<Action> out;
  int forwards = 0, backwards = 0;
  while (backwards < m) {
    if (forwards < m && forwards - backwards < cap) {
      out.push_back({Pass::kForward, forwards++});
    } else {
      out.push_back({Pass::kBackward, backwards++});
    }
  }
  return out;
}

/// 1F1B's in-flight counts (one per stage), searched for. Note [GPipe and 1F1B]
/// defines 1F1B by what it achieves: GPipe's step time (the same bubble) with each
/// stage holding as few micro-batches as that allows. The search starts every stage
/// at cap m (the greedy order is then GPipe's) and lowers one stage's cap at a time
/// while the greedy orders of all stages, simulated with unit forwards and backwards
/// of 1 and of 2, still finish without deadlock at GPipe's makespan; it stops when
/// no cap can be lowered. (The schedule tests check that the result is GPipe-fast
/// and that no cap can be lowered, so a search that stopped early would show.)
inline std::vector<int> leanest_caps(int stages, int m) {
  std::vector<int> caps(static_cast<std::size_t>(stages), m);
  auto orders_of = [&](const std::vector<int>& c) {
    std::vector<std::vector<Action>> orders;
    for (int cap : c) orders.push_back(greedy_order(m, cap));
    return orders;
  };
  auto as_fast_as_gpipe = [&](const std::vector<int>& c) {
    const std::vector<int> gpipe(static_cast<std::size_t>(stages), m);
    for (double t_b : {1.0, 2.0}) {
      const Simulation sim = simulate(orders_of(c), 1, m, 1.0, t_b);
      if (!sim.deadlock.empty() || sim.makespan > simulate(orders_of(gpipe), 1, m, 1.0, t_b).makespan) return false;
    }
    return true;
  };
  for (bool lowered = true; lowered;) {
    lowered = false;
    for (std::size_t s = 0; s < caps.size(); ++s) {
      while (caps[s] > 1) {
        std::vector<int> lower = caps;
        --lower[s];
        if (!as_fast_as_gpipe(lower)) break;
        caps = lower;
        lowered = true;
      }
    }
  }
  return caps;
}

}  // namespace lab07_test
