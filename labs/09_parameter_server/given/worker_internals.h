// Lab 09, given (not a task): what the worker's side (src/worker.cc) leans on. The
// sends in flight of one WorkerClient, kept behind a mutex because the engine's
// threads push and pull at once (your finish() waits for them with reap();
// given/worker_client.cc sends them), and a guard of the model's pre_forward hook.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

#include "harness/comm/mpi_comm.h"
#include "harness/error.h"
#include "harness/nn/model.h"
#include "lab09/parameter_server.h"

namespace dtl::lab09 {

/// @brief The sends in flight of one worker, shared by the engine's threads.
struct WorkerClient::Impl {
  std::mutex mutex;                             ///< guards both lists
  std::vector<MPI_Request> requests;            ///< one per send in flight
  std::vector<std::vector<std::byte>> buffers;  ///< the bytes of each, kept until it completes

  /// @brief Frees the sends that completed; the rest stay. Call with the mutex held.
  void reap() {
    for (std::size_t i = 0; i < requests.size();) {
      int done = 0;
      DTL_MPI_CHECK(MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE));
      if (done) {
        requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(i));
        buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
};

/// @brief Restores the model's pre_forward hook however the step ends.
struct HookGuard {
  nn::Model& model;                 ///< the model whose hook is restored
  std::function<void(int)> saved;   ///< its pre_forward hook before the step
  /// @brief Saves `m`'s pre_forward hook.
  /// @param[in,out] m the model.
  explicit HookGuard(nn::Model& m) : model(m), saved(m.hooks().pre_forward) {}
  /// @brief Puts the saved hook back.
  ~HookGuard() { model.hooks().pre_forward = saved; }
};

}  // namespace dtl::lab09
