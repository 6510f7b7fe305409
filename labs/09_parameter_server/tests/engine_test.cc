// Lab 09, task F: the dependency engine against Note [Dependencies].
//
//   - order: random programs (operations reading and mutating random variables);
//     every operation records when it started and finished (one atomic counter),
//     and every pair that conflicts (a variable in common, one of them mutating
//     it) must have run in push order, the first finished before the second
//     started; the variables' final values must equal the program run one
//     operation at a time;
//   - concurrency, by observation and not by timing: two operations with no
//     conflict each wait for the other to have started. Run one after the
//     other, the first waits in vain (up to a deadline) and says so;
//   - errors: an operation's exception reaches wait_all() with its own type;
//     a wait that cannot end in time throws TimeoutError naming what is left.
// No MPI inside: the tests run the same on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/error.h"
#include "labs/09_parameter_server/tests/ps_test_util.h"

namespace lab09_test {
namespace {

using lab09::Engine;
using lab09::Var;

constexpr double kWait = 30.0;  // seconds; only a bug reaches it

struct OpSpec {
  std::vector<Var> reads, mutates;
};

bool conflict(const OpSpec& a, const OpSpec& b) {
  auto has = [](const std::vector<Var>& list, Var v) { return std::find(list.begin(), list.end(), v) != list.end(); };
  for (Var v : a.mutates) {
    if (has(b.reads, v) || has(b.mutates, v)) return true;
  }
  for (Var v : b.mutates) {
    if (has(a.reads, v)) return true;
  }
  return false;
}

// Mixes the values an operation reads into the ones it mutates: the result depends on the order.
std::uint64_t mix(std::uint64_t acc, std::uint64_t x) { return (acc ^ x) * 0x9E3779B97F4A7C15ull + 7; }

TEST(Engine, RandomProgramsRunInDependencyOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int vars = 2 + static_cast<int>(rng() % 5), ops = 10 + static_cast<int>(rng() % 30);
    std::vector<OpSpec> program(static_cast<std::size_t>(ops));
    for (OpSpec& op : program) {
      for (int v = 0; v < vars; ++v) {
        const unsigned r = rng() % 6;
        if (r == 0) op.mutates.push_back(v);
        if (r == 1 || r == 2) op.reads.push_back(v);
      }
    }
    // The program one operation at a time.
    std::vector<std::uint64_t> serial(static_cast<std::size_t>(vars), 1);
    for (std::size_t i = 0; i < program.size(); ++i) {
      std::uint64_t acc = i;
      for (Var v : program[i].reads) acc = mix(acc, serial[static_cast<std::size_t>(v)]);
      for (Var v : program[i].mutates) acc = mix(acc, serial[static_cast<std::size_t>(v)]);
      for (Var v : program[i].mutates) serial[static_cast<std::size_t>(v)] = mix(acc, static_cast<std::uint64_t>(v));
    }
    // The same program on the engine, 3 threads.
    std::vector<std::uint64_t> state(static_cast<std::size_t>(vars), 1);
    std::vector<int> started(program.size(), -1), finished(program.size(), -1);
    std::atomic<int> counter{0};
    {
      Engine engine(3);
      std::vector<Var> handles;
      for (int v = 0; v < vars; ++v) handles.push_back(engine.new_var("v" + std::to_string(v)));
      for (std::size_t i = 0; i < program.size(); ++i) {
        OpSpec op = program[i];
        engine.push(
            "op" + std::to_string(i),
            [&, i, op] {
              started[i] = counter++;
              std::uint64_t acc = i;
              for (Var v : op.reads) acc = mix(acc, state[static_cast<std::size_t>(v)]);
              for (Var v : op.mutates) acc = mix(acc, state[static_cast<std::size_t>(v)]);
              if (i % 3 == 0) std::this_thread::yield();  // let others interleave
              for (Var v : op.mutates) state[static_cast<std::size_t>(v)] = mix(acc, static_cast<std::uint64_t>(v));
              finished[i] = counter++;
            },
            op.reads, op.mutates);
      }
      engine.wait_all(kWait);
    }
    for (std::size_t i = 0; i < program.size(); ++i) {
      ASSERT_GE(finished[i], 0) << "trial " << trial << ": op" << i << " never ran";
      for (std::size_t j = i + 1; j < program.size(); ++j) {
        if (!conflict(program[i], program[j])) continue;
        ASSERT_LT(finished[i], started[j]) << "trial " << trial << ": op" << j << " started (event " << started[j]
                                           << ") before op" << i << ", pushed earlier on a shared variable, finished (event "
                                           << finished[i] << ")";
      }
    }
    for (int v = 0; v < vars; ++v) {
      ASSERT_EQ(state[static_cast<std::size_t>(v)], serial[static_cast<std::size_t>(v)])
          << "trial " << trial << ": variable v" << v << " differs from running the program one operation at a time";
    }
  }
}

// Two operations that each wait (up to a deadline) for the other to have started.
// Returns what each saw: "" if the other had started, else a sentence.
std::vector<std::string> rendezvous(Engine& engine, const std::vector<Var>& a_reads, const std::vector<Var>& a_mutates,
                                    const std::vector<Var>& b_reads, const std::vector<Var>& b_mutates) {
  std::atomic<bool> a_started{false}, b_started{false};
  std::vector<std::string> seen(2);
  auto wait_other = [](std::atomic<bool>& other) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!other.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return other.load();
  };
  engine.push("A", [&] {
    a_started = true;
    if (!wait_other(b_started)) seen[0] = "A waited 5 s for B to start: B did not run beside A";
  }, a_reads, a_mutates);
  engine.push("B", [&] {
    b_started = true;
    if (!wait_other(a_started)) seen[1] = "B waited 5 s for A to start: A did not run beside B";
  }, b_reads, b_mutates);
  engine.wait_all(kWait);
  return seen;
}

TEST(Engine, IndependentOperationsRunConcurrently) {
  Engine engine(2);
  const Var x = engine.new_var("x"), y = engine.new_var("y");
  for (const std::string& s : rendezvous(engine, {}, {x}, {}, {y})) EXPECT_EQ(s, "") << "A mutates x, B mutates y";
  for (const std::string& s : rendezvous(engine, {x}, {}, {x}, {})) EXPECT_EQ(s, "") << "A and B both only read x";
}

TEST(Engine, ConflictingOperationsDoNotOverlap) {
  Engine engine(2);
  const Var x = engine.new_var("x");
  std::atomic<int> readers{0}, writers{0}, overlaps{0};
  for (int i = 0; i < 30; ++i) {
    const bool mutate = i % 3 == 0;
    engine.push("op" + std::to_string(i), [&, mutate] {
      if (mutate) {
        if (++writers > 1 || readers.load() > 0) ++overlaps;
      } else {
        ++readers;
        if (writers.load() > 0) ++overlaps;
      }
      std::this_thread::yield();
      if (mutate) {
        --writers;
      } else {
        --readers;
      }
    }, mutate ? std::vector<Var>{} : std::vector<Var>{x}, mutate ? std::vector<Var>{x} : std::vector<Var>{});
  }
  engine.wait_all(kWait);
  EXPECT_EQ(overlaps.load(), 0) << "a mutator of x ran while another operation on x was running";
}

TEST(Engine, WaitForOneVariableOnly) {
  Engine engine(2);
  const Var x = engine.new_var("x"), y = engine.new_var("y");
  std::atomic<bool> release{false}, x_done{false};
  engine.push("slow y", [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!release.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }, {}, {y});
  engine.push("x", [&] { x_done = true; }, {}, {x});
  engine.wait_for(x, kWait);  // must not wait for "slow y"
  EXPECT_TRUE(x_done.load());
  try {
    engine.wait_for(y, 0.05);
    ADD_FAILURE() << "wait_for(y) returned while \"slow y\" was still running";
  } catch (const dtl::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("slow y"), std::string::npos) << "the timeout must name the operation: " << e.what();
  }
  release = true;
  engine.wait_all(kWait);
}

TEST(Engine, AnOperationsErrorReachesWaitAllWithItsType) {
  Engine engine(2);
  const Var x = engine.new_var("x");
  engine.push("fails", [] { throw lab09::StepFailed("step 3 failed"); }, {}, {x});
  engine.push("after", [] {}, {x}, {});
  EXPECT_THROW(engine.wait_all(kWait), lab09::StepFailed);
  EXPECT_THROW(Engine(0), dtl::InvalidArgument);
  EXPECT_THROW(engine.push("bad", [] {}, {7}, {}), dtl::InvalidArgument);
}

}  // namespace
}  // namespace lab09_test
