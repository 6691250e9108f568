#include "daemon/instance.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string_view>
#include <sys/file.h>
#include <unistd.h>

namespace ktune::daemon {

namespace {

std::string read_small(int fd) {
  char buf[64] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

} // namespace

Result<void> lock_now(int fd, const std::string& path, std::string& holder) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return {};
  if (errno == EWOULDBLOCK) {
    holder = trim(read_small(fd));
    if (holder.empty()) holder = "unknown";
    return make_error(ErrorCode::already_running, holder);
  }
  return make_error(ErrorCode::io_error, "cannot lock " + path + ": " + std::strerror(errno));
}

bool write_all(int fd, std::string_view text) { return write_all_fd(fd, text); }

Result<InstanceLock> InstanceLock::acquire(const SafeDir& dir, const std::string& lock_name,
                                           const std::string& pid_name) {
  const std::string lock_file = dir.file_path(lock_name);
  auto fd = dir.open_file(lock_name, O_RDWR, FileCreate::either);
  if (!fd) return fd.error();
  std::string holder;
  if (auto locked = lock_now(fd->get(), lock_file, holder); !locked) {
    if (locked.error().code != ErrorCode::already_running) return locked.error();
    return make_error(ErrorCode::already_running, "ktuned already running (pid " + holder + ")");
  }
  const std::string pid_line = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd->get(), 0) != 0 || !write_all(fd->get(), pid_line)) {
    return make_error(ErrorCode::io_error, "cannot write pid into " + lock_file + ": " + std::strerror(errno));
  }
  // Written whole under a temporary name and renamed, so readers never see it half-written.
  if (auto written = dir.write_atomic(pid_name, pid_line); !written) return written.error();
  return InstanceLock(std::move(*fd), dir.file_path(pid_name));
}

InstanceLock::~InstanceLock() {
  if (!m_fd.valid()) return; // moved from
  if (!m_pid_file.empty()) ::unlink(m_pid_file.c_str());
  // The lock itself is released when m_fd closes.
}

} // namespace ktune::daemon
