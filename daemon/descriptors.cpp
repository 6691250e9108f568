#include "daemon/descriptors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ktune::daemon {

namespace {

// Standard streams, ready fd, database (SQLite's file, WAL, shm; ktuned's own descriptor of it;
// the identity marker and spill journal in passing), the instance lock and the runtime
// directory, the cpu lane's core claim, the acceptor, epoll, its eventfd and timerfd, the signal
// pipe, inotify (table_dirs), /metrics' listener and a connection of it, the stop guard's pipe,
// the helper thread's files (a kernel spec, a table), the reserve. Measured: 21 open when idle.
constexpr std::size_t k_fixed = 28;
// Each worker: its socketpair end and its stderr pipe, and one in passing (spawning it).
constexpr std::size_t k_per_worker = 3;
// Bench lanes counted before the devices are known: the CPU and one GPU. More GPUs take a few
// more; past the estimate the reserve refuses connections before anything else fails.
constexpr std::size_t k_lanes = 2;

} // namespace

Result<DescriptorLimit> raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return make_error(ErrorCode::io_error, std::string("cannot read RLIMIT_NOFILE: ") + std::strerror(errno));
  }
  DescriptorLimit out;
  out.raised_from = limit.rlim_cur;
  out.hard = limit.rlim_max;
  const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, k_max_descriptors);
  if (wanted > limit.rlim_cur) {
    rlimit raised = limit;
    raised.rlim_cur = wanted;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  out.soft = limit.rlim_cur;
  return out;
}

std::size_t descriptors_besides_connections(const DaemonConfig& config) {
  const std::size_t workers = static_cast<std::size_t>(std::max(1, config.compile_workers)) + 1 + k_lanes;
  return k_fixed + k_per_worker * workers;
}

Result<std::string> fit_connections(DaemonConfig& config, const DescriptorLimit& limit) {
  const std::size_t own = descriptors_besides_connections(config);
  const std::size_t room = limit.soft > own ? static_cast<std::size_t>(limit.soft - own) : 0;
  if (config.max_connections <= room) return std::string();
  const std::string numbers =
      "ktuned may open " + std::to_string(limit.soft) + " file descriptors (RLIMIT_NOFILE, hard "
      "limit " + std::to_string(limit.hard) + ") and needs about " + std::to_string(own) +
      " of them itself (database, logs, event loop, " +
      std::to_string(std::max(1, config.compile_workers)) + " compile worker(s) and the bench lanes)";
  if (config.max_connections_set || room == 0) {
    return make_error(ErrorCode::config_error,
                      "[limits].max_connections = " + std::to_string(config.max_connections) +
                          " cannot fit: " + numbers + ", which leaves " + std::to_string(room) +
                          " for connections. Lower max_connections to at most " +
                          std::to_string(room) + " or raise the limit (ulimit -n; systemd: "
                          "LimitNOFILE=)");
  }
  const std::size_t before = config.max_connections;
  config.max_connections = room;
  return "serving at most " + std::to_string(room) + " connections instead of " +
         std::to_string(before) + ": " + numbers + " (raise the limit for more)";
}

DescriptorReserve::DescriptorReserve() : m_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

bool DescriptorReserve::refuse_one(int listen_fd, const std::string& line) {
  m_fd.reset();
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  bool refused = false;
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    ++m_refused;
    refused = true;
  }
  m_fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return refused;
}

bool DescriptorReserve::should_log(std::uint64_t& count) {
  const auto now = std::chrono::steady_clock::now();
  if (m_refused == 0 || now - m_logged < k_log_every) return false;
  m_logged = now;
  count = m_refused;
  m_refused = 0;
  return true;
}

} // namespace ktune::daemon
