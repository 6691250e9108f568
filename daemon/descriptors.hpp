#pragma once
// ktuned's file descriptors (RLIMIT_NOFILE), planned at start and watched while it serves.
//
// - At start the soft limit is raised to the hard one (within k_max_descriptors), and the
//   connections must fit in what is left once ktuned's own descriptors are counted
//   (descriptors_besides_connections: database, logs, locks, event loop, workers and their
//   pipes, the reserve): a max_connections given in the config that cannot fit stops the start
//   naming both numbers; the default is lowered to fit, with a warning.
// - DescriptorReserve holds one descriptor (/dev/null) for the moment accept fails with EMFILE
//   or ENFILE: it is closed, the waiting connection accepted on it, told too_many_connections and
//   closed, and the reserve opened again; so no connection waits unanswered in the backlog and
//   lookups on open connections go on (they are answered from memory). Such refusals are logged
//   at most once per k_log_every, with how many there were.
#include "core/result.hpp"
#include "core/unique_fd.hpp"
#include "daemon/config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ktune::daemon {

inline constexpr std::uint64_t k_max_descriptors = 1 << 20;

struct DescriptorLimit {
  std::uint64_t soft = 0;          // in force after raise_descriptor_limit
  std::uint64_t hard = 0;
  std::uint64_t raised_from = 0;   // the soft limit found (== soft when nothing changed)
};

// Raises RLIMIT_NOFILE's soft limit to the hard limit (at most k_max_descriptors).
// Errors: io_error when the limits cannot be read.
[[nodiscard]] Result<DescriptorLimit> raise_descriptor_limit();

// What ktuned opens besides client connections, for `config`: a fixed part and a part per
// worker (compile workers, the borrowed one, a bench lane per device).
[[nodiscard]] std::size_t descriptors_besides_connections(const DaemonConfig& config);

// Fits config.max_connections in `limit`: unchanged when it fits; lowered (returned text says
// so, for the log) when it was not set in the config; else config_error naming the numbers.
[[nodiscard]] Result<std::string> fit_connections(DaemonConfig& config, const DescriptorLimit& limit);

// The spare descriptor for refusing connections when none is left (see above). io thread only.
class DescriptorReserve {
public:
  static constexpr auto k_log_every = std::chrono::seconds(10);

  DescriptorReserve();
  // Accepts one waiting connection on `listen_fd` with the reserve, writes `line` to it and
  // closes it, then takes the reserve again. False when no connection was waiting (or even the
  // reserve could not be freed). Counts it for the log (should_log).
  bool refuse_one(int listen_fd, const std::string& line);
  // True at most once per k_log_every while refusals happen; `count` gets how many since the
  // last time it was true.
  [[nodiscard]] bool should_log(std::uint64_t& count);

private:
  UniqueFd m_fd;
  std::uint64_t m_refused = 0;
  std::chrono::steady_clock::time_point m_logged{};
};

} // namespace ktune::daemon
