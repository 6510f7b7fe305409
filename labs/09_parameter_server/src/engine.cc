// Lab 09, task F: the dependency engine (its pool, waits, constructor and destructor
// are given: given/engine_pool.cc).
//
// What this file teaches: a scheduler that runs operations in parallel yet gives
// the result of running them one by one in push order, by ordering only the
// operations that conflict on a variable. You write push() and finish().
//
// Contract (Note [Dependencies] in lab09/engine.h): after push(op), op runs only
// once every earlier-pushed operation it conflicts with has finished (a read
// after the last earlier mutation of that variable; a mutation after the last
// earlier mutation and every read since), and as soon as that holds a pool
// thread can take it from ready_. finish(op) makes ready every operation that
// was waiting for op alone. The state it needs is declared in lab09/engine.h
// (Op::waiting, Op::dependents, the per-variable records, ready_, all_).
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "harness/error.h"
#include "lab09/engine.h"

namespace dtl::lab09 {

void Engine::push(std::string name, std::function<void()> fn, std::vector<Var> reads, std::vector<Var> mutates) {
  auto op = std::make_shared<Op>();
  op->name = std::move(name);
  op->fn = std::move(fn);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::vector<Var>* list : {&reads, &mutates}) {
    for (Var v : *list) {
      DTL_REQUIRE_ARG(v >= 0 && v < static_cast<Var>(vars_.size()), "Engine::push",
                      list == &reads ? "reads" : "mutates",
                      "names variable " + std::to_string(v) + "; there are " + std::to_string(vars_.size()));
    }
  }
  // TODO(student): Add an operation that reads `reads` and mutates `mutates` (a var in both lists counts
  //   as mutated) so that it runs only after every earlier-pushed operation it conflicts with
  //   has finished: a read after the last earlier write of that var, a write after the last
  //   earlier write and every earlier read since. Operations that do not conflict may run at
  //   once. Once nothing it depends on is unfinished it goes to ready_ and a pool thread is
  //   woken (Note [Dependencies], handout Task F).
  throw dtl::NotImplemented("Engine::push");
}

void Engine::finish(const std::shared_ptr<Op>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  // TODO(student): `op` has run: mark it finished, release every operation that was waiting only on it
  //   (ready_, wake a pool thread), forget it (all_) and wake whoever waits for operations to
  //   finish (done_cv_).
  throw dtl::NotImplemented("Engine::finish");
}

}  // namespace dtl::lab09
