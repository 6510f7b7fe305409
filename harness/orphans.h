/// @file
/// @brief No process outlives a test or benchmark rank: See Note [No process outlives a rank].
#pragma once

namespace dtl {

/// @brief Kills (SIGKILL) every descendant process of this one and reaps them.
///
/// The MPI test and benchmark mains call it when a rank ends, normally or by the
/// watchdog. Linking this file also makes the process the subreaper of its
/// descendants before any other static initializer runs, so that an orphan (a
/// double fork, a setsid) is still found here. See Note [No process outlives a rank]
/// in orphans.cc.
void kill_descendants() noexcept;

}  // namespace dtl
