// Lab 04, given (not a task): a helper of check_model_agreement() (src/ddp_model.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dtl::lab04 {

/// A parameter's name as a number exactly representable in a double (52 bits), so it
/// travels through an f64 allgather unchanged.
inline double hash_name(const std::string& name) {
  return static_cast<double>(std::hash<std::string>{}(name) & ((std::uint64_t{1} << 52) - 1));
}

}  // namespace dtl::lab04
