// Note [No process outlives a rank]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Code under test (a submission's, even in a static initializer) may start a
// process that keeps running. It would hold the rank's stdout, and mpirun waits
// for every output pipe to close, so the run would last until the grader's wall
// limit (and a grader that then counted the run's tests as passed would be
// fooled). So each rank makes itself the subreaper of its descendants before any
// other static initializer runs (constructor priority 101, ahead of every C++
// dynamic initializer): an orphan's new parent is then this rank, not init, even
// after a double fork or setsid. And each rank kills all of its descendants when
// it ends: after its last test or benchmark, and when the watchdog fires. The
// grader's sandbox (a PID namespace) is the second wall.
#include "harness/orphans.h"

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dtl {
namespace {

__attribute__((constructor(101))) void adopt_orphans() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

// Every process's children, from /proc/PID/stat (the parent is the field after the state).
std::map<pid_t, std::vector<pid_t>> children_by_parent() {
  std::map<pid_t, std::vector<pid_t>> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 1));
    std::string state;
    long parent = 0;
    if (fields >> state >> parent) children[static_cast<pid_t>(parent)].push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

}  // namespace

void kill_descendants() noexcept {
  try {
    auto children = children_by_parent();
    std::vector<pid_t> todo = {getpid()};
    while (!todo.empty()) {
      const pid_t pid = todo.back();
      todo.pop_back();
      for (pid_t child : children[pid]) {
        ::kill(child, SIGKILL);
        todo.push_back(child);
      }
    }
  } catch (...) {
    // Reading /proc failed: nothing more can be done here; the sandbox still ends them.
  }
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace dtl
