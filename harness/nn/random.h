/// @file
/// @brief The training core's random numbers: dtl::Rng (harness/random.h), named in dtl::nn.
///
/// Weight initialisation draws from the same portable generator as the data
/// sets, so a model made from a seed has the same bits on every rank and machine.
#pragma once

#include "harness/random.h"

namespace dtl::nn {
using dtl::Rng;
using dtl::splitmix64;
}  // namespace dtl::nn
