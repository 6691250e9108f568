#include "bench/cpu_placement.hpp"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ktune {
namespace {

// Every thread of this process gets `set` (the calling one first: its failure is the error).
Result<void> move_threads(const cpu_set_t& set) {
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    return make_error(ErrorCode::internal,
                      std::string("sched_setaffinity of the bench thread: ") + std::strerror(errno));
  }
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return {};  // no /proc: threads started from here still inherit the set
  const auto self = static_cast<long>(::syscall(SYS_gettid));
  while (const dirent* entry = ::readdir(tasks)) {
    char* end = nullptr;
    const long tid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || tid == self) continue;
    (void)::sched_setaffinity(static_cast<pid_t>(tid), sizeof set, &set);  // it may have exited
  }
  ::closedir(tasks);
  return {};
}

} // namespace

std::vector<int> current_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

Result<CpuPlacement> CpuPlacement::apply(const std::vector<int>& cpus) {
  CpuPlacement placement;
  if (cpus.empty()) return placement;
  cpu_set_t wanted;
  CPU_ZERO(&wanted);
  for (const int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return make_error(ErrorCode::internal, "cpu " + std::to_string(cpu) + " is not a valid CPU index");
    }
    CPU_SET(cpu, &wanted);
  }
  if (::sched_getaffinity(0, sizeof placement.m_before, &placement.m_before) != 0) {
    return make_error(ErrorCode::internal, std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  if (CPU_EQUAL(&wanted, &placement.m_before)) return placement;
  if (auto moved = move_threads(wanted); !moved) return moved.error();
  placement.m_moved = true;
  return placement;
}

CpuPlacement::CpuPlacement(CpuPlacement&& other) noexcept
    : m_before(other.m_before), m_moved(other.m_moved) {
  other.m_moved = false;
}

CpuPlacement::~CpuPlacement() {
  if (m_moved) (void)move_threads(m_before);
}

} // namespace ktune
