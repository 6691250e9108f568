#pragma once
// The process metrics every Prometheus exporter serves (the client libraries' "process"
// collector): CPU seconds, resident and virtual memory, open and maximum file descriptors, and
// the start time, read from /proc/self and getrusage at each scrape. Linux only; a figure that
// cannot be read is absent (nullopt), never a made-up zero.
#include <optional>

namespace ktune::daemon {

struct ProcessFigures {
  std::optional<double> cpu_seconds;           // user + system CPU time of the whole process
  std::optional<double> resident_bytes;        // /proc/self/statm's resident pages
  std::optional<double> virtual_bytes;         // /proc/self/statm's size
  std::optional<double> open_fds;              // entries of /proc/self/fd
  std::optional<double> max_fds;               // RLIMIT_NOFILE's soft limit
  std::optional<double> start_time_seconds;    // since the Unix epoch: /proc/self/stat + btime
};

// This process's figures now. Reads a few small /proc files; no allocation beyond a line each.
[[nodiscard]] ProcessFigures read_process_figures();

} // namespace ktune::daemon
