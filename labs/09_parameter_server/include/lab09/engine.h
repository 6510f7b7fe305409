/// @file
/// @brief Lab 09, task F — the dependency engine (engine.cc).
///
/// MXNet's engine (Chen et al., 2015) in miniature: every operation is pushed
/// with the variables it reads and the variables it mutates, and a small thread
/// pool runs it as soon as the operations it depends on have finished. The
/// caller writes a sequential program; the engine finds the parallelism. In
/// this lab the pulls of a worker's keys are operations that mutate the key's
/// variable, and each unit's forward waits for its own keys only, so the pull
/// of layer l + 1 runs while layer l computes. See Note [Dependencies].
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtl::lab09 {

// Note [Dependencies]
// ~~~~~~~~~~~~~~~~~~~
// Operations on one variable keep the order they were pushed in, with readers
// allowed to overlap each other:
//
//   - an operation that READS v runs after the last operation pushed before it
//     that MUTATES v;
//   - an operation that MUTATES v runs after every operation pushed before it
//     that reads or mutates v (since the last mutation: the earlier ones are
//     already ordered before that one).
//
// Two operations with no variable in common, or that only read a common one, may
// run at once. The program's result is then the result of running the
// operations one by one in push order (the engine only reorders what commutes).
//
// An operation listing a variable both to read and to mutate is a mutator of it.
// An operation is ready (a pool thread may take it) exactly when every operation
// it must run after has finished; one with nothing to wait for is ready at push.
// Each operation runs once, on one pool thread.
//
//     push A: mutates x            A ready
//     push B: reads x              B waits for A
//     push C: reads x              C waits for A (B and C may overlap)
//     push D: mutates x            D waits for B and C (A is before them)
//     push E: reads y              E ready: runs beside A

/// @brief A variable: a name for a piece of state operations read or mutate.
using Var = int;

/// @brief Runs pushed operations on a thread pool in dependency order (Note [Dependencies]).
class Engine {
 public:
  /// @brief Starts `threads` worker threads.
  /// @param[in] threads >= 1.
  /// @throws dtl::InvalidArgument if threads < 1.
  explicit Engine(int threads);
  /// @brief Waits for every operation, then stops the threads (errors are dropped).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// @brief A new variable.
  /// @param[in] name its name, for messages.
  /// @return its handle.
  Var new_var(std::string name);
  /// @brief Pushes an operation: it runs on a pool thread after its dependencies.
  /// @param[in] name the operation's name, for messages.
  /// @param[in] fn what it does (may throw: the first error is rethrown by wait_all()/wait_for()).
  /// @param[in] reads the variables it reads.
  /// @param[in] mutates the variables it mutates.
  /// @throws dtl::InvalidArgument naming `reads` or `mutates` for an unknown variable.
  void push(std::string name, std::function<void()> fn, std::vector<Var> reads, std::vector<Var> mutates);
  /// @brief Waits until every operation pushed so far that reads or mutates `v` has finished.
  /// @param[in] v the variable.
  /// @param[in] timeout_seconds how long to wait.
  /// @throws dtl::TimeoutError naming the variable and the operations not finished;
  ///         the first error of any operation (rethrown).
  void wait_for(Var v, double timeout_seconds);
  /// @brief Waits until every operation pushed so far has finished.
  /// @param[in] timeout_seconds how long to wait.
  /// @throws dtl::TimeoutError naming the operations not finished; the first error of any operation.
  void wait_all(double timeout_seconds);
  /// @return the number of pool threads.
  int threads() const noexcept { return static_cast<int>(threads_.size()); }

 private:
  struct Op {
    std::string name;
    std::function<void()> fn;
    int waiting = 0;                          // unfinished dependencies
    bool finished = false;
    std::vector<std::shared_ptr<Op>> dependents;
  };
  struct VarState {
    std::string name;
    std::shared_ptr<Op> last_mutator;                 // may be finished
    std::vector<std::shared_ptr<Op>> readers;         // since the last mutator
  };
  void depend(const std::shared_ptr<Op>& op, const std::shared_ptr<Op>& on);
  void run_pool();
  void finish(const std::shared_ptr<Op>& op);
  std::string unfinished_names(const std::vector<std::shared_ptr<Op>>& ops) const;

  std::mutex mutex_;
  std::condition_variable ready_cv_;  // a ready operation, or stop
  std::condition_variable done_cv_;   // an operation finished
  std::vector<std::shared_ptr<Op>> ready_;
  std::vector<std::shared_ptr<Op>> all_;  // pushed and not yet finished
  std::vector<VarState> vars_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace dtl::lab09
