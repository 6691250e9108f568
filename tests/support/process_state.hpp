#pragma once
// The state letter of a process, from /proc/<pid>/stat: 'R', 'S', 'T' when stopped, 'Z' when it
// has exited and waits for its reaper; '?' when there is no such process or it cannot be read.
#include <fstream>
#include <iterator>
#include <string>
#include <sys/types.h>

namespace ktune::test {

inline char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

} // namespace ktune::test
