#pragma once
// run_tool: runs one of ktune's binaries (or any program) with exactly the environment given,
// stdin from /dev/null, stdout and stderr captured together, and waits for it at most `timeout`
// (then SIGKILL; code -1). For tests that must control XDG_RUNTIME_DIR, XDG_STATE_HOME, HOME and
// the umask of what they start.
#include <chrono>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ktune::test {

struct ToolRun {
  int code = -1;           // exit status; 128 + signal; -1 when it was killed at the timeout
  std::string output;      // stdout and stderr
};

[[nodiscard]] ToolRun run_tool(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env,
                               std::chrono::milliseconds timeout, mode_t umask_value = 022);

} // namespace ktune::test
