/// @file
/// @brief The Communicator backends the harness's tests run against, by name: the
/// three MpiCommunicator modes and the emulator on a fast link (communicator_test.cc
/// sweeps them all; the overlap and timeline tests pick some).
#pragma once

#include <memory>

#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/testing/mpi_test.h"

namespace dtl::testing {

/// @brief A backend under test.
enum class Backend { kNonblocking, kThread, kPolling, kEmulated };
/// @brief Every backend, for sweeps.
inline constexpr Backend kBackends[] = {Backend::kNonblocking, Backend::kThread, Backend::kPolling, Backend::kEmulated};

/// @brief A new communicator of `backend` over the test's communicator; the emulator
/// gets a fast link, so that correctness sweeps stay quick.
inline std::unique_ptr<Communicator> make_backend(Backend backend) {
  switch (backend) {
    case Backend::kNonblocking: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kNonblocking);
    case Backend::kThread: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread);
    case Backend::kPolling: return std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kPolling);
    case Backend::kEmulated:
      return std::make_unique<dtl::EmulatedCommunicator>(
          std::make_unique<dtl::MpiCommunicator>(comm(), dtl::MpiMode::kThread),
          dtl::parse_link("alpha=1us,bw=100GB/s"));
  }
  return nullptr;
}

}  // namespace dtl::testing
