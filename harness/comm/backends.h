/// @file
/// @brief Backends by name: the harness's, plus a lab's own (one place for the names
/// every lab's make_communicator() accepts).
///
/// Header-only: "nccl" needs dtl::cuda, which a lab links only where NCCL was found
/// (DTL_HAVE_NCCL), so this is compiled in the lab's own file.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/comm/emulated_communicator.h"
#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"

#if DTL_HAVE_NCCL
#include "harness/comm/nccl_communicator.h"
#endif

namespace dtl {

/// @brief A lab's own backends: the one named, or null when the name is not the lab's.
using OwnBackends = std::function<std::unique_ptr<Communicator>(const std::string& name, MPI_Comm parent)>;

/// @brief Makes a backend from its name. Collective over `parent`.
///
/// Names: the lab's own (`own`, asked first), "mpi-thread", "mpi-nonblocking",
/// "mpi-polling" (MpiCommunicator), "nccl" (NcclCommunicator: device buffers, one
/// GPU per rank, in builds with NCCL) and "emulated:LINK" (EmulatedCommunicator:
/// the backend named `emulated_over` does the real reduction, completion follows
/// the link model; LINK as parse_link(), e.g. "10GbE" or "alpha=5us,bw=10GB/s").
/// @param[in] name the backend's name.
/// @param[in] parent the ranks, e.g. MPI_COMM_WORLD.
/// @param[in] own the lab's backends (may be empty).
/// @param[in] emulated_over the backend under "emulated:" links.
/// @param[in] known the names to list when `name` is unknown, e.g. "mpi-thread, ring, ...".
/// @return the communicator.
/// @throws dtl::InvalidArgument for an unknown name or link, or "nccl" in a build without NCCL.
inline std::unique_ptr<Communicator> make_backend(const std::string& name, MPI_Comm parent, const OwnBackends& own,
                                                  const std::string& emulated_over, const std::string& known) {
  if (own) {
    if (auto backend = own(name, parent)) return backend;
  }
  if (name == "mpi-thread") return std::make_unique<MpiCommunicator>(parent, MpiMode::kThread);
  if (name == "mpi-nonblocking") return std::make_unique<MpiCommunicator>(parent, MpiMode::kNonblocking);
  if (name == "mpi-polling") return std::make_unique<MpiCommunicator>(parent, MpiMode::kPolling);
  if (name == "nccl") {
#if DTL_HAVE_NCCL
    return std::make_unique<NcclCommunicator>(parent);
#else
    throw_invalid_argument("make_communicator", "name",
                           "is 'nccl', but this build has no NCCL (it needs nvcc and NCCL at configure time; "
                           "see cmake/README.md)");
#endif
  }
  const std::string prefix = "emulated:";
  if (name.rfind(prefix, 0) == 0) {
    // Parse first (the same on every rank), so a bad name throws before any collective.
    LinkModel link = parse_link(name.substr(prefix.size()));
    return std::make_unique<EmulatedCommunicator>(make_backend(emulated_over, parent, own, emulated_over, known),
                                                  std::move(link));
  }
  throw_invalid_argument("make_communicator", "name", "is '" + name + "', an unknown backend (" + known + ")");
}

}  // namespace dtl
