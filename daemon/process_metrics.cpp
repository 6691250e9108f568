#include "daemon/process_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ktune::daemon {

namespace {

double timeval_seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

// The process's start in clock ticks after boot: field 22 of /proc/self/stat, counted after the
// command name's closing parenthesis (the name may hold spaces and parentheses).
std::optional<double> start_ticks_after_boot() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // After ")": field 3 (state) is the first; starttime is field 22.
  for (int number = 3; number <= 22; ++number) {
    if (!(fields >> field)) return std::nullopt;
  }
  try {
    return std::stod(field);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<double> boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      if (in >> value) return value;
      return std::nullopt;
    }
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

std::optional<double> count_open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory stream's own descriptor
}

} // namespace

ProcessFigures read_process_figures() {
  ProcessFigures out;
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    out.cpu_seconds = timeval_seconds(usage.ru_utime) + timeval_seconds(usage.ru_stime);
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  std::ifstream statm("/proc/self/statm");
  double size_pages = 0, resident_pages = 0;
  if (page > 0 && statm >> size_pages >> resident_pages) {
    out.virtual_bytes = size_pages * static_cast<double>(page);
    out.resident_bytes = resident_pages * static_cast<double>(page);
  }
  out.open_fds = count_open_fds();
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    out.max_fds = static_cast<double>(files.rlim_cur);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const auto started = start_ticks_after_boot();
  const auto boot = boot_time_seconds();
  if (ticks > 0 && started && boot) out.start_time_seconds = *boot + *started / static_cast<double>(ticks);
  return out;
}

} // namespace ktune::daemon
