/// @file
/// @brief Emulated compute for the graded benchmark rows: a layer that sleeps.
///
/// A speed item graded on a shared 2-core machine must measure the schedule (what
/// overlaps what), not how busy the cores are. The emulated link
/// (harness/comm/emulated_communicator.h) already waits by sleeping; a SleepLayer
/// does the same for compute: its forward and backward sleep fixed times, as a
/// unit's work would take on an accelerator, and the cores stay free.
/// With both sides emulated, overlap shows as a ratio of sleeps, which other
/// processes on the machine barely move (See Note [The graded row] in each lab's
/// bench). The layer passes its input through and has no parameters.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/nn/dense.h"
#include "harness/nn/layer_interface.h"
#include "harness/nn/model.h"
#include "harness/random.h"

namespace dtl::bench {

/// @brief A parameterless layer whose forward sleeps `forward_seconds` and whose
/// backward sleeps `backward_seconds`; y = x, dx = dy.
class SleepLayer final : public nn::Layer {
 public:
  /// @brief A layer called `name` that stands for some compute.
  /// @param[in] name the layer's name.
  /// @param[in] forward_seconds the forward's sleep.
  /// @param[in] backward_seconds the backward's sleep (a real layer's backward costs
  ///            about twice its forward; a row may choose otherwise, and says why).
  SleepLayer(std::string name, double forward_seconds, double backward_seconds)
      : nn::Layer(std::move(name)), forward_seconds_(forward_seconds), backward_seconds_(backward_seconds) {}
  /// @return "Sleep".
  std::string kind() const override { return "Sleep"; }
  /// @brief Sleeps, then passes `x` through.
  /// @param[in] x any tensor.
  /// @return x.
  const nn::Tensor& forward(const nn::Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(forward_seconds_));
    return x;
  }
  /// @brief Sleeps the backward's time, then passes `dy` through.
  /// @param[in] dy any tensor.
  /// @return dy.
  const nn::Tensor& backward(const nn::Tensor& dy, const nn::GradReadyFn&) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(backward_seconds_));
    return dy;
  }
  /// @param[in] input any shape.
  /// @return the same shape.
  nn::Shape output_shape(const nn::Shape& input) const override { return input; }
  /// @brief Nothing is cached.
  void release_slot(int) override {}

 private:
  double forward_seconds_, backward_seconds_;
};

/// @brief The graded rows' model: `units` units, each a Linear(width, width) (real
/// parameters and gradients to communicate) followed by a SleepLayer (the compute).
/// @param[in] units how many units.
/// @param[in] width the Linear's in and out features.
/// @param[in] forward_seconds, backward_seconds each SleepLayer's times.
/// @param[in] seed the weights' seed.
/// @return the model, not flattened (a lab flattens what it needs).
inline nn::Model sleep_model(int units, std::int64_t width, double forward_seconds, double backward_seconds,
                             std::uint64_t seed) {
  dtl::Rng rng(seed);
  nn::Model model;
  for (int u = 0; u < units; ++u) {
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(std::make_unique<nn::Linear>("fc" + std::to_string(u), width, width, nn::DType::kF32, rng));
    layers.push_back(std::make_unique<SleepLayer>("compute" + std::to_string(u), forward_seconds, backward_seconds));
    model.add_unit("u" + std::to_string(u), std::move(layers));
  }
  return model;
}

/// @brief The graded rows' link: the emulated `link` over a polling MPI backend. Its
/// progress thread sleeps between MPI_Tests, where a communication thread would spin
/// inside a blocking collective and take the cores the ranks' sleeps leave free (on
/// a busy machine, the spin is the noise).
/// @param[in] comm the ranks.
/// @param[in] link a link description for parse_link(), e.g. "alpha=100us,bw=25MB/s".
/// @return the backend.
inline std::unique_ptr<Communicator> polling_emulated_link(MPI_Comm comm, const std::string& link) {
  return std::make_unique<EmulatedCommunicator>(std::make_unique<MpiCommunicator>(comm, MpiMode::kPolling),
                                                parse_link(link));
}

}  // namespace dtl::bench
